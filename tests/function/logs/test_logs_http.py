"""Through a real Functions Framework server: every line a delivery writes, the job's own
`logging` lines included, carries the request's trace and the run's labels, so Logs Explorer
groups a delivery under its request and a run across its deliveries; a hostile trace header
is ignored and the delivery answered as any other."""

from __future__ import annotations

from typing import Any

import requests

from exactly_once.log_fields import LABELS, OUTCOME, SPAN_ID, TRACE, TRACE_SAMPLED
from localrun.function_log import log_lines
from tests.support.demo_runs import HEADERS, REPO_ROOT, RUN_ID, server_env

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
LOGGING_JOB = "tests.function.logs.logging_jobs:log_a_little"


def _post(server: Any, **headers: str) -> requests.Response:
    return requests.post(server.url, headers={**HEADERS, **headers}, data=b"", timeout=60)


def test_the_delivery_and_the_jobs_own_lines_carry_the_trace_and_the_run(
    function_servers, emulator_host, project, db, log_path
):
    server = function_servers(
        server_env(emulator_host, project, JOB_HANDLER=LOGGING_JOB, PYTHONPATH=REPO_ROOT)
    )
    reply = _post(server, traceparent=f"00-{TRACE_ID}-{SPAN}-01")
    assert (reply.status_code, reply.json()["outcome"]) == (200, "executed")

    lines = list(log_lines(log_path))
    delivery = next(line for line in lines if line.get(OUTCOME) == "executed")
    job_lines = [line for line in lines if "logger" in line]
    assert [(line["severity"], line["logger"]) for line in job_lines] == [
        ("INFO", "tests.function.logs.logging_jobs"),
        ("WARNING", "root"),
        ("ERROR", "tests.function.logs.logging_jobs"),
    ]
    assert job_lines[0]["message"] == f"working on {RUN_ID}"
    assert "ValueError: a row could not be read" in job_lines[2]["exception"]
    for line in [delivery, *job_lines]:
        assert line[TRACE] == f"projects/{project}/traces/{TRACE_ID}"
        assert (line[SPAN_ID], line[TRACE_SAMPLED]) == (SPAN, True)
        assert line[LABELS] == {"run_id": RUN_ID, "job": "nightly"}
    assert "a plain print" in log_path.read_text(errors="replace")


def test_a_hostile_trace_header_is_ignored_and_the_run_still_labelled(
    function_servers, emulator_host, project, db, log_path
):
    server = function_servers(server_env(emulator_host, project))
    hostile = {"traceparent": "00-" + "f" * 4000, "X-Cloud-Trace-Context": '"}{"severity":"CRITICAL"'}
    first = _post(server, **hostile)
    again = _post(server, **hostile)
    assert [first.status_code, again.status_code] == [200, 200]
    assert [first.json()["outcome"], again.json()["outcome"]] == ["executed", "duplicate_completed"]
    deliveries = [line for line in log_lines(log_path) if OUTCOME in line and line.get("run_id") == RUN_ID]
    assert len(deliveries) == 2
    for line in deliveries:
        assert TRACE not in line and SPAN_ID not in line and line["severity"] == "INFO"
        assert line[LABELS] == {"run_id": RUN_ID, "job": "nightly"}
