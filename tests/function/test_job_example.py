"""The example of docs/jobs.md, run as written: a user module in a copy of function/, served
by the Functions Framework; and the overlap policies through the deployed entry point."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from google.cloud.firestore_v1.base_query import FieldFilter

from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from localrun import FUNCTION_DIR
from localrun.tcp_proxy import tcp_proxy
from tests.function.test_http import executions, server_env
from tests.support.waiting import wait_until

JOBS_DOC = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
EXAMPLE = "nightly_report.py"


def example_source() -> str:
    text = JOBS_DOC.read_text()
    found = re.search(rf"<!-- example: {re.escape(EXAMPLE)} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, f"docs/jobs.md has no example block for {EXAMPLE}"
    return found.group(1)


def headers(job: str, time: str) -> dict[str, str]:
    return {JOB_NAME_HEADER: job, SCHEDULE_TIME_HEADER: time}


def post(server, job: str, time: str, body: dict[str, object] | None = None) -> requests.Response:
    data = json.dumps(body).encode() if body is not None else b""
    return requests.post(server.url, headers=headers(job, time), data=data, timeout=60)


def reports(db, job: str, time: str) -> int:
    run_id = run_key_from_headers(headers(job, time)).run_id
    query = db.collection("reports").where(filter=FieldFilter("run_id", "==", run_id))
    return len(list(query.stream()))


def test_the_documented_example_runs_once_and_answers_its_output(
    function_servers, emulator_host, project, db, tmp_path
):
    source = tmp_path / "function"
    shutil.copytree(FUNCTION_DIR, source, ignore=shutil.ignore_patterns("__pycache__"))
    (source / EXAMPLE).write_text(example_source())

    with tcp_proxy(emulator_host) as proxy:
        env = {**server_env(emulator_host, project), "FIRESTORE_EMULATOR_HOST": proxy.host}
        server = function_servers(env, source=source / EXAMPLE, target="nightly_report")

        first = post(server, "nightly-report", "2026-10-16T03:00:00Z", {"region": "emea"})
        assert (first.status_code, first.json()["outcome"]) == (200, "executed")
        output = first.json()["output"]
        assert output["region"] == "emea" and output["report"] == first.json()["attempt_id"]
        duplicate = post(server, "nightly-report", "2026-10-16T03:00:00Z", {"region": "emea"})
        assert (duplicate.status_code, duplicate.json()["outcome"]) == (200, "duplicate_completed")
        assert duplicate.json()["output"] == output

        typo = post(server, "nightly-report", "2026-10-17T03:00:00Z", {"regoin": "emea"})
        assert (typo.status_code, typo.json()["outcome"]) == (200, "failed_terminal")

        barrier = threading.Barrier(8)

        def concurrent_delivery(_: int) -> str:
            barrier.wait(timeout=30)
            return str(post(server, "nightly-report", "2026-10-18T03:00:00Z").json()["outcome"])

        with ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = Counter(pool.map(concurrent_delivery, range(8)))
        assert outcomes["executed"] == 1, outcomes
        assert set(outcomes) <= {"executed", "in_progress", "duplicate_completed"}, outcomes
        assert reports(db, "nightly-report", "2026-10-18T03:00:00Z") == 1

        proxy.cut()  # Firestore unreachable from the function
        remembered = post(server, "nightly-report", "2026-10-16T03:00:00Z", {"region": "emea"})
        assert (remembered.status_code, remembered.json()["outcome"]) == (200, "duplicate_completed")
        assert remembered.json()["output"] == output
        new_run = post(server, "nightly-report", "2026-10-19T03:00:00Z")
        assert (new_run.status_code, new_run.json()["outcome"]) == (500, "store_error")

    assert reports(db, "nightly-report", "2026-10-16T03:00:00Z") == 1


# --- overlap policies through handle_scheduled_job and the demo job ----------------------------

FIRST, SECOND = "2026-10-16T12:00:00Z", "2026-10-16T12:15:00Z"


@pytest.fixture
def overlap_server(function_servers, emulator_host, project):
    return function_servers(server_env(emulator_host, project, JOB_OVERLAP='{"a": "skip", "b": "wait"}'))


def executed_runs(db, job: str, time: str) -> int:
    return len(executions(db, run_key_from_headers(headers(job, time)).run_id))


def start_long_first_run(server, db, job: str) -> threading.Thread:
    thread = threading.Thread(target=post, args=(server, job, FIRST, {"sleep_seconds": 3}))
    thread.start()
    run_id = run_key_from_headers(headers(job, FIRST)).run_id
    wait_until(
        lambda: db.collection("scheduler_runs").document(run_id).get().exists,
        timeout=20,
        what=f"the first run of {job} to be claimed",
    )
    return thread


def test_skip_never_runs_an_overlapping_run(overlap_server, db):
    first = start_long_first_run(overlap_server, db, "a")
    skipped = post(overlap_server, "a", SECOND)
    assert (skipped.status_code, skipped.json()["outcome"]) == (200, "overlap_skipped")
    first.join(timeout=60)
    again = post(overlap_server, "a", SECOND)
    assert (again.status_code, again.json()["outcome"]) == (200, "overlap_skipped")
    assert (executed_runs(db, "a", FIRST), executed_runs(db, "a", SECOND)) == (1, 0)


def test_wait_retries_until_the_earlier_run_ends_then_runs_once(overlap_server, db):
    first = start_long_first_run(overlap_server, db, "b")
    waiting = post(overlap_server, "b", SECOND)
    assert (waiting.status_code, waiting.json()["outcome"]) == (409, "overlap_wait")
    assert int(waiting.headers["Retry-After"]) >= 1
    first.join(timeout=60)
    ran = post(overlap_server, "b", SECOND)
    assert (ran.status_code, ran.json()["outcome"]) == (200, "executed")
    assert post(overlap_server, "b", SECOND).json()["outcome"] == "duplicate_completed"
    assert (executed_runs(db, "b", FIRST), executed_runs(db, "b", SECOND)) == (1, 1)


def test_jobs_without_a_policy_still_overlap(overlap_server, db):
    first = start_long_first_run(overlap_server, db, "c")
    overlapping = post(overlap_server, "c", SECOND)
    assert (overlapping.status_code, overlapping.json()["outcome"]) == (200, "executed")
    first.join(timeout=60)
    assert (executed_runs(db, "c", FIRST), executed_runs(db, "c", SECOND)) == (1, 1)
