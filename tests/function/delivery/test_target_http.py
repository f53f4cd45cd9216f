"""The target recorded with each run is a setting (@exactly_once(target=...), by default the
Cloud Run service), never the decorated Python function's name: a deploy that renames the function is
still the same target to the runs it left behind. Through real Functions Framework servers:
the stack's function, then a source whose decorated function has another name, one service."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from exactly_once import RunContext, exactly_once
from exactly_once.config import FunctionConfig
from exactly_once.decorator import target_of
from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER, run_key_from_headers
from localrun import FUNCTION_DIR
from tests.support.demo_runs import HEADERS
from tests.support.faulty_instance import Faults, instance_env, marks, warm_up
from tests.support.waiting import wait_until

RENAMED_SOURCE = """
import functions_framework

from exactly_once import RunContext, exactly_once
from tests.support.faulty_instance import marked_sleep


@functions_framework.http
@exactly_once
def nightly_report_v2(run: RunContext) -> object:
    return marked_sleep(run)
"""


def run(minute: int) -> dict[str, str]:
    return {**HEADERS, SCHEDULE_TIME_HEADER: f"2026-10-16T12:{minute:02d}:00Z"}


def post(server, headers: dict[str, str], body: dict[str, Any]) -> requests.Response | None:
    try:
        return requests.post(server.url, headers=headers, json=body, timeout=60)
    except requests.ConnectionError:
        return None  # the instance ended under it


def test_a_renamed_function_answers_and_takes_over_the_runs_of_its_service(
    function_servers, emulator_host, project, db, tmp_path: Path
):
    env = instance_env(
        emulator_host, project, Faults(tmp_path / "faults.json"), "marked_sleep", K_SERVICE="billing"
    )
    env["LEASE_SECONDS"] = "6"
    before = function_servers(env)
    done, interrupted, warm = run(0), run(15), run(45)
    warm_up(before.url, warm)
    assert post(before, done, {"seconds": 0}).json()["outcome"] == "executed"  # type: ignore[union-attr]
    crashing = threading.Thread(target=lambda: post(before, interrupted, {"seconds": 60}))
    crashing.start()
    interrupted_id = run_key_from_headers(interrupted).run_id
    wait_until(lambda: marks(db, interrupted_id), timeout=30, what="the interrupted run's job to start")
    before.crash()  # the deploy replaces the instance mid-run
    crashing.join(timeout=30)

    source = tmp_path / "renamed" / "main.py"
    source.parent.mkdir()
    source.write_text(RENAMED_SOURCE)
    # The renamed source imports the library from function/, as the deployed one does (the
    # runtime's virtualenv has the function's requirements, not the package installed).
    path = os.pathsep.join(filter(None, (env.get("PYTHONPATH"), str(FUNCTION_DIR))))
    after = function_servers({**env, "PYTHONPATH": path}, source=source, target="nightly_report_v2")
    warm_up(after.url, warm)  # answered from the record: its channel is up

    duplicate = post(after, done, {"seconds": 0})
    assert duplicate is not None
    assert (duplicate.status_code, duplicate.json()["outcome"]) == (200, "duplicate_completed"), (
        duplicate.text
    )

    def retried_past_in_progress() -> str | None:
        reply = post(after, interrupted, {"seconds": 0})
        outcome = str(reply.json()["outcome"]) if reply is not None else "no answer"
        return outcome if outcome != "in_progress" else None

    outcome = wait_until(retried_past_in_progress, timeout=60, what="the retry to take over", interval=0.2)
    assert outcome == "lease_taken_over"
    stored = db.collection("scheduler_runs").document(interrupted_id).get().to_dict()
    assert (stored["status"], stored["target"]) == ("completed", "billing")
    assert len(marks(db, run_key_from_headers(done).run_id)) == 1


def test_the_target_is_the_decorators_else_the_service_and_never_holds_a_slash() -> None:
    def job(run: RunContext) -> None:
        del run

    with_service = FunctionConfig(service="billing")
    assert target_of(with_service) == "billing"
    assert target_of(with_service, "reports") == "reports"
    assert target_of(FunctionConfig()) == ""
    assert callable(exactly_once(target="reports")(job)) and callable(exactly_once(job))
    for bad in ("billing/main.report", " "):
        with pytest.raises(ValueError, match="target"):
            exactly_once(target=bad)
