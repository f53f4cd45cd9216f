"""The Cloud Run job proxy end to end: real function server, emulator, loopback Cloud Run
Admin API speaking run_v2's REST wire protocol."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from exactly_once.delivery.request_checks import CACHE_CONTROL_HEADER, NO_CACHE
from exactly_once.targets.job_specs import CLOUD_RUN_HANDLER, CLOUD_RUN_JOBS_ENV
from localrun.function_server import FunctionServer, FunctionServerError
from tests.support.fake_cloud_run import FakeCloudRun
from tests.support.google_rest_fake import HELD
from tests.support.proxy_runs import HEADERS, JOB_NAME, RUN_ID, concurrent, deliver, proxy_env, run_record
from tests.support.proxy_time_limits import (
    SHORT_TIME_LIMIT,
    TOO_SHORT_FOR_A_CALL,
    ended_attempts,
    released_errors,
)

JOB = "projects/acme/locations/europe-west1/jobs/nightly-export"
JOB_SPEC = {"job": JOB, "args": ["--export", "daily"], "env": {"TARGET": "warehouse"}, "taskCount": 2}
SCHEDULED = datetime.fromisoformat(HEADERS["X-CloudScheduler-ScheduleTime"].replace("Z", "+00:00"))


@pytest.fixture
def fake():
    cloud_run = FakeCloudRun(jobs={JOB}).start()
    yield cloud_run
    cloud_run.stop()


def env_for(
    emulator_host: str, project: str, fake: FakeCloudRun, spec: dict[str, Any], **extra: str
) -> dict[str, str]:
    return proxy_env(
        emulator_host,
        project,
        CLOUD_RUN_HANDLER,
        CLOUD_RUN_API_ENDPOINT=fake.endpoint,
        **{CLOUD_RUN_JOBS_ENV: json.dumps({JOB_NAME: spec})},
        **extra,
    )


@pytest.fixture
def start_server(function_servers, emulator_host, project, fake):
    def start(spec=JOB_SPEC, **extra):
        return function_servers(env_for(emulator_host, project, fake, spec, **extra))

    return start


def redo(server: FunctionServer) -> requests.Response:
    """The delivery `ops redo` sends once it has deleted the run's record."""
    headers = {**HEADERS, CACHE_CONTROL_HEADER: NO_CACHE}
    return requests.post(server.url, headers=headers, data=b"{}", timeout=60)


def env_of(execution: dict[str, Any]) -> dict[str, str]:
    (container,) = execution["template"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def test_one_execution_per_run_carries_the_token_and_the_overrides(start_server, fake):
    server = start_server()
    first = deliver(server, {})
    assert (first.status_code, first.json()["outcome"]) == (200, "executed"), first.json()
    (execution,) = fake.started(JOB)
    assert first.json()["output"] == {"execution": execution["name"], "reused": False}
    assert fake.calls == [("GET", f"/v2/{JOB}/executions"), ("POST", f"/v2/{JOB}:run")]
    again = deliver(server, {})
    assert again.json()["outcome"] == "duplicate_completed"
    assert again.json()["output"]["execution"] == execution["name"]
    assert len(fake.calls) == 2  # the duplicate is answered from the ledger

    assert env_of(execution) == {
        "TARGET": "warehouse",
        "RUN_ID": RUN_ID,
        "FENCE": str(first.json()["fence"]),
        "SCHEDULE_TIME": "2026-10-16T12:00:00Z",
        "SCHEDULER_JOB": JOB_NAME,
    }
    (container,) = execution["template"]["containers"]
    assert container["args"] == ["--export", "daily"] and execution["taskCount"] == 2
    assert len(fake.started(JOB)) == 1


def test_a_lost_answer_leads_to_one_execution_not_two(start_server, fake, db):
    """The execution started, its answer was lost, the run was released and retried: the
    retry finds the execution by its RUN_ID and reuses it."""
    fake.failures.extend([None, ("lost", 503)])  # the list goes through, the run's answer is lost
    server = start_server()
    lost = deliver(server, {})
    assert (lost.status_code, lost.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    (execution,) = fake.started(JOB)

    retried = deliver(server, {})
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed")
    assert retried.json()["output"] == {"execution": execution["name"], "reused": True}
    assert len(fake.started(JOB)) == 1
    assert len(fake.run_requests) == 1


def test_a_redo_finds_the_earlier_execution_by_its_run_id_and_starts_nothing(start_server, fake, db):
    """`ops redo` deletes the run's record and delivers the run again, as no-cache: same run,
    same RUN_ID."""
    server = start_server()
    first = deliver(server, {}).json()
    run_record(db).reference.delete()
    redone = redo(server).json()
    assert redone["outcome"] == "executed"
    assert redone["output"] == {"execution": first["output"]["execution"], "reused": True}
    assert len(fake.started(JOB)) == len(fake.run_requests) == 1


@pytest.mark.parametrize(
    ("script", "held_call"),
    [([HELD], "listing the executions of"), ([None, HELD], "running")],
    ids=["search", "run"],
)
def test_a_call_held_past_the_time_limit_is_cut_short_and_the_run_released(
    start_server, fake, db, log_path, script, held_call
):
    """A 5 s time limit and an answer that never comes: the call's timeout is what the attempt
    has left, not the call timeout, so the attempt answers (released) rather than its instance
    being ended mid-call, and the retry finds or starts the run's one execution."""
    fake.failures.extend(script)
    server = start_server(**SHORT_TIME_LIMIT)
    held = deliver(server, {})
    assert (held.status_code, held.json()["outcome"]) == (500, "failed_released")
    (error,) = released_errors(log_path)
    assert f"{held_call} {JOB}" in error and "Timeout" in error, error
    assert ended_attempts(log_path) == []
    assert not run_record(db).exists

    retried = deliver(server, {})
    assert retried.json()["outcome"] == "executed"
    (execution,) = fake.started(JOB)
    assert retried.json()["output"] == {"execution": execution["name"], "reused": len(script) == 2}
    assert len(fake.run_requests) == 1


def test_too_little_time_for_a_call_releases_the_run_and_calls_nothing(start_server, fake, db, log_path):
    server = start_server(**TOO_SHORT_FOR_A_CALL)
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released")
    assert "not called" in released_errors(log_path)[0]
    assert fake.calls == [] and not run_record(db).exists


def test_eight_concurrent_deliveries_start_one_execution(start_server, fake):
    server = start_server()
    replies = concurrent(8, lambda _: deliver(server, {}))
    outcomes = Counter(reply.json()["outcome"] for reply in replies)
    assert outcomes["executed"] == 1, outcomes
    assert {reply.status_code for reply in replies} <= {200, 409}
    assert len(fake.started(JOB)) == len(fake.run_requests) == 1


def test_the_search_reads_back_to_the_schedule_time_and_no_further(start_server, fake):
    """150 executions of other runs since the schedule time, 300 from before it: the search
    reads two pages of 100 and stops at the first execution older than the schedule time."""
    now = datetime.now(UTC)
    for index in range(150):
        fake.seed(JOB, now - timedelta(seconds=index + 1))
    for index in range(300):
        fake.seed(JOB, SCHEDULED - timedelta(days=1, seconds=index))
    server = start_server()
    assert deliver(server, {}).json()["outcome"] == "executed"
    assert fake.list_pages == 2
    assert len(fake.run_requests) == 1


def test_unavailable_releases_the_run_and_the_retry_starts_it_once(start_server, fake, db):
    fake.failures.append(503)  # the list fails: nothing was started
    server = start_server()
    assert deliver(server, {}).json()["outcome"] == "failed_released"
    assert fake.run_requests == []
    assert deliver(server, {}).json()["outcome"] == "executed"
    assert len(fake.started(JOB)) == 1


def test_a_missing_job_is_terminal(start_server, fake, db):
    server = start_server({"job": "projects/acme/locations/europe-west1/jobs/no-such-job"})
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    record = run_record(db).to_dict()
    assert record["result"] == "terminal_failure" and "404" in record["error"]
    assert deliver(server, {}).json()["outcome"] == "duplicate_completed"


def test_a_refused_run_is_terminal(start_server, fake, db):
    fake.failures.extend([None, 403])  # the list goes through, jobs.run is refused
    server = start_server()
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    assert "403" in run_record(db).to_dict()["error"]
    assert fake.started(JOB) == []


@pytest.mark.parametrize("body", [{"job": JOB}, {"anything": 1}])
def test_a_body_is_refused_and_calls_nothing(start_server, fake, body):
    server = start_server()
    assert deliver(server, body).json()["outcome"] == "failed_terminal"
    assert fake.calls == []


def test_a_job_without_settings_is_terminal(function_servers, emulator_host, project, fake):
    env = proxy_env(emulator_host, project, CLOUD_RUN_HANDLER, CLOUD_RUN_API_ENDPOINT=fake.endpoint)
    reply = deliver(function_servers(env), {})
    assert reply.json()["outcome"] == "failed_terminal"
    assert fake.calls == []


def test_malformed_settings_stop_the_instance_naming_the_variable(emulator_host, project, log_path, fake):
    bad = {JOB_NAME: {"job": JOB, "env": {"RUN_ID": "mine"}}}
    env = proxy_env(emulator_host, project, CLOUD_RUN_HANDLER, **{CLOUD_RUN_JOBS_ENV: json.dumps(bad)})
    with pytest.raises(FunctionServerError, match=r"CLOUD_RUN_JOBS.*env\.RUN_ID"):
        FunctionServer(env, log_path).start()
