"""The Cloud Run job proxy end to end: real function server, emulator, loopback Cloud Run
Admin API speaking run_v2's REST wire protocol. What it shares with the other proxies is in
test_proxy_conformance.py; here, what only it does: the execution's overrides, the search by
RUN_ID back to the schedule time, and its settings."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once.targets.cloud_run_job_spec import CLOUD_RUN_JOBS_ENV
from localrun.function_server import FunctionServer, FunctionServerError
from tests.function.targets.proxy_kinds import CLOUD_RUN_HANDLER
from tests.function.targets.proxy_kinds import CLOUD_RUN_JOB as JOB
from tests.function.targets.proxy_kinds import CLOUD_RUN_JOB_SPEC as JOB_SPEC
from tests.support.fake_cloud_run import FakeCloudRun
from tests.support.proxy_runs import HEADERS, JOB_NAME, RUN_ID, deliver, proxy_env, run_record

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


def env_of(execution: dict[str, Any]) -> dict[str, str]:
    (container,) = execution["template"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def test_the_execution_carries_the_token_and_the_overrides(start_server, fake):
    server = start_server()
    first = deliver(server, {})
    assert (first.status_code, first.json()["outcome"]) == (200, "executed"), first.json()
    (execution,) = fake.started(JOB)
    assert first.json()["output"] == {"execution": execution["name"], "reused": False}
    assert fake.calls == [("GET", f"/v2/{JOB}/executions"), ("POST", f"/v2/{JOB}:run")]

    assert env_of(execution) == {
        "TARGET": "warehouse",
        "RUN_ID": RUN_ID,
        "FENCE": str(first.json()["fence"]),
        "SCHEDULE_TIME": "2026-10-16T12:00:00Z",
        "SCHEDULER_JOB": JOB_NAME,
    }
    (container,) = execution["template"]["containers"]
    assert container["args"] == ["--export", "daily"] and execution["taskCount"] == 2


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


def test_a_missing_job_is_terminal(start_server, fake, db):
    server = start_server({"job": "projects/acme/locations/europe-west1/jobs/no-such-job"})
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    record = run_record(db).to_dict()
    assert record["result"] == "terminal_failure" and "404" in record["error"]
    assert deliver(server, {}).json()["outcome"] == "duplicate_completed"


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
