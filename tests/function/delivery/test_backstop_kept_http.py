"""A job that calls faulthandler's timer functions while its attempt's backstop holds the
process's one timer, served by a real Functions Framework process: each call is refused with
a WARNING line, so a library cannot disarm or re-arm the backstop without a word."""

from __future__ import annotations

import requests

from localrun.function_log import log_lines
from tests.support.demo_runs import HEADERS, RUN_ID
from tests.support.faulty_instance import Faults, instance_env, marks


def test_a_jobs_calls_to_faulthandlers_timer_leave_the_backstop_armed_and_say_so(
    function_servers, emulator_host, project, db, tmp_path, log_path
):
    server = function_servers(
        instance_env(emulator_host, project, Faults(tmp_path / "f.json"), "touches_faulthandler")
    )

    reply = requests.post(server.url, headers=HEADERS, timeout=60)

    assert (reply.status_code, reply.json()["outcome"]) == (200, "executed"), reply.text
    kept = [line for line in log_lines(log_path) if line.get("event") == "backstop_kept"]
    assert [(line["severity"], line["call"]) for line in kept] == [
        ("WARNING", "cancel_dump_traceback_later"),
        ("WARNING", "dump_traceback_later"),
    ]
    assert len(marks(db, RUN_ID)) == 1
