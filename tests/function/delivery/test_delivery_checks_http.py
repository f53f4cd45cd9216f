"""The delivery checks through a real Functions Framework server: a redo past the warm
cache, the same run with other bytes, a run recorded by another function, a terminal error
too large or unencodable to store as it is."""

from __future__ import annotations

import json

import requests

from exactly_once.errors import MAX_ERROR_BYTES
from tests.function.marked_jobs import MARKS
from tests.support.demo_runs import HEADERS, REPO_ROOT, deliver, executions, run_record, server_env


def test_a_redo_with_no_cache_runs_again_where_scheduler_retries_are_answered_from_memory(start_server, db):
    server = start_server()
    assert deliver(server).json()["outcome"] == "executed"
    run_record(db).reference.delete()  # the operator's redo of a run
    assert deliver(server).json()["outcome"] == "duplicate_completed"  # this instance remembers
    redo = requests.post(server.url, headers={**HEADERS, "Cache-Control": "no-cache"}, timeout=60)
    assert (redo.status_code, redo.json()["outcome"]) == (200, "executed")
    assert len(executions(db)) == 2


def test_the_same_run_with_another_body_is_flagged_not_run(start_server, db):
    server = start_server()
    assert deliver(server, {"sleep_seconds": 0}).json()["outcome"] == "executed"
    same = deliver(server, {"sleep_seconds": 0})
    other = deliver(server, {"sleep_seconds": 1})
    assert same.json()["outcome"] == "duplicate_completed" and "body_mismatch" not in same.json()
    assert (other.json()["outcome"], other.json()["body_mismatch"]) == ("duplicate_completed", True)
    assert len(executions(db)) == 1


def test_two_functions_sharing_a_collection_and_a_job_name_refuse_each_others_runs(
    function_servers, emulator_host, project, db
):
    billing = function_servers(server_env(emulator_host, project, K_SERVICE="billing"))
    crm = function_servers(server_env(emulator_host, project, K_SERVICE="crm"))
    assert deliver(billing).json()["outcome"] == "executed"
    refused = deliver(crm)
    assert (refused.status_code, refused.json()["outcome"]) == (409, "wrong_target")
    assert "billing" in refused.json()["message"]
    assert run_record(db).to_dict()["target"] == "billing"
    assert len(executions(db)) == 1


def test_a_terminal_error_is_recorded_once_however_large_or_unencodable(
    function_servers, emulator_host, project, db
):
    env = server_env(
        emulator_host, project, JOB_HANDLER="tests.function.marked_jobs:fail_terminally", PYTHONPATH=REPO_ROOT
    )
    server = function_servers(env)
    for schedule_time, body in (
        ("2026-10-16T12:00:00Z", {"text": "x", "repeat": 2 * 1024 * 1024}),
        ("2026-10-16T12:15:00Z", {"text": "bad \udc80 surrogate"}),
    ):
        headers = {**HEADERS, "X-CloudScheduler-ScheduleTime": schedule_time}
        data = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as \\udc80
        first = requests.post(server.url, headers=headers, data=data, timeout=60)
        again = requests.post(
            server.url, headers={**headers, "Cache-Control": "no-cache"}, data=data, timeout=60
        )
        assert (first.status_code, first.json()["outcome"]) == (200, "failed_terminal")
        assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")
    stored = [doc.to_dict()["error"] for doc in db.collection("scheduler_runs").stream()]
    assert len(stored) == 2 and all(len(error.encode()) <= MAX_ERROR_BYTES for error in stored)
    assert any("\\udc80" in error for error in stored)
    assert len(list(db.collection(MARKS).stream())) == 2  # each job ran once
