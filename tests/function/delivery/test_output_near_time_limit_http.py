"""A job that returns a value far too large to store, near its time limit, served by a real
Functions Framework process: the value is refused by its size once the job has returned,
outside the watched block and without costing time in proportion to it, so the run is
recorded failed_terminal once instead of being ended by the watchdog and retried for ever.

A 4 s time limit; the job returns 47 MB of JSON with 1.5 s of it left. Encoding that and
scanning its nesting took seconds, inside the watched block."""

from __future__ import annotations

import requests

from localrun.function_log import log_lines
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.faulty_instance import Faults, instance_env, marks

BODY = {"left": 1.5, "megabytes": 47}


def post(server) -> requests.Response | None:
    try:
        return requests.post(server.url, headers=HEADERS, json=BODY, timeout=60)
    except requests.ConnectionError:
        return None  # the instance ended under it


def test_a_huge_output_returned_near_the_time_limit_is_failed_terminal_once(
    function_servers, emulator_host, project, db, tmp_path, log_path
):
    faults = Faults(tmp_path / "faults.json")
    env = instance_env(emulator_host, project, faults, "huge_output_late", JOB_TIME_LIMIT_SECONDS="4")
    server = function_servers(env)

    reply = post(server)

    assert reply is not None, "the instance was ended"
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal"), reply.text
    record = run_record(db).to_dict()
    assert (record["status"], record["result"]) == ("completed", "terminal_failure")
    assert "more than the 65536 bytes" in record["error"]
    assert [line for line in log_lines(log_path) if line.get("event") == "attempt_ended"] == []
    again = post(server)
    assert again is not None and again.json()["outcome"] == "duplicate_completed"
    assert len(marks(db, RUN_ID)) == 1
