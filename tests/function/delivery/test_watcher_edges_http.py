"""The lease watcher's edges, through real Functions Framework servers whose own Firestore
client misbehaves on cue (tests/support/faulty_instance.py): a renewal that fails before
any RPC (credentials), a claim answered after the job's time limit, a renewal in flight when
the job returns."""

from __future__ import annotations

from typing import Any

import requests

from localrun.function_log import log_lines
from tests.support.crashed_runs import OTHER_RUN
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.faulty_instance import (
    Faults,
    instance_env,
    is_completion,
    marks,
    process_running,
    warm_up,
)
from tests.support.waiting import wait_until


def post(server, body: dict[str, Any]) -> requests.Response | None:
    try:
        return requests.post(server.url, headers=HEADERS, json=body, timeout=90)
    except requests.ConnectionError:
        return None  # the instance ended under it


def test_a_renewal_whose_credentials_fail_is_a_failed_renewal_and_ends_the_attempt_with_a_line(
    function_servers, emulator_host, project, db, tmp_path, log_path
):
    """Not a Google API error: the watcher used to die of it silently, and only the backstop
    ended the attempt, with no attempt_ended line. A 9 s lease: given up on at 7.5 s."""
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(instance_env(emulator_host, project, faults, "marked_sleep", LEASE_SECONDS="9"))
    warm_up(server.url, OTHER_RUN)
    faults.set([{"id": "refresh", "rpc": "Commit", "fields": ["renewed_at"], "action": "refresh"}])
    (worker,) = server.worker_pids()

    reply = post(server, {"seconds": 60})

    assert reply is None  # ended, unanswered
    wait_until(lambda: not process_running(worker), timeout=30, what="the worker to end")
    (ended,) = [line for line in log_lines(log_path) if line.get("event") == "attempt_ended"]
    assert ended["cause"] == "renewal_failed" and ended["renewals"] == 0
    assert "RefreshError" in ended["renewal_error"]
    assert "Timeout (" not in log_path.read_text()  # the watchdog ended it, not the backstop


def test_a_claim_answered_after_the_time_limit_is_given_back_and_the_job_never_starts(
    function_servers, emulator_host, project, db, tmp_path
):
    """A 2 s time limit; the claim's create is answered 2.5 s late (within its RPC's 3.3 s)."""
    faults = Faults(tmp_path / "faults.json")
    env = instance_env(emulator_host, project, faults, "marked_sleep", JOB_TIME_LIMIT_SECONDS="2")
    server = function_servers(env)
    warm_up(server.url, OTHER_RUN)
    faults.set([{"id": "slow", "rpc": "BatchWrite", "action": "delay", "seconds": 2.5, "times": 1}])

    late = post(server, {"seconds": 0})

    assert late is not None, "the instance was ended"
    assert (late.status_code, late.json()["outcome"]) == (500, "store_error"), late.text
    assert marks(db, RUN_ID) == [] and not run_record(db).exists  # never started; released
    retry = post(server, {"seconds": 0})
    assert retry is not None and retry.json()["outcome"] == "executed"
    assert len(marks(db, RUN_ID)) == 1


def test_a_renewal_in_flight_when_the_job_returns_does_not_hold_the_completing_write(
    function_servers, emulator_host, project, db, tmp_path
):
    """A 12 s lease: renewed at 4 s, each RPC allowed 2 s, the end of the attempt waiting 1 s
    at most for a renewal in flight. The renewal's answer comes 1.5 s late, and the job
    returns as soon as that renewal is on the wire: the completion is sent before the renewal
    is answered, is refused (the renewal committed first), and is sent again on the renewed
    record."""
    faults = Faults(tmp_path / "faults.json")
    env = instance_env(emulator_host, project, faults, "return_during_renewal", LEASE_SECONDS="12")
    server = function_servers(env)
    warm_up(server.url, OTHER_RUN)
    faults.set([{"id": "slow", "rpc": "Commit", "fields": ["renewed_at"], "action": "delay", "seconds": 1.5}])

    reply = post(server, {})

    assert reply is not None
    assert (reply.status_code, reply.json()["outcome"]) == (200, "executed"), reply.text
    assert reply.json()["output"] == {"renewal_sent": True}

    def renewal_answered() -> int | None:
        return next((e["seq"] for e in faults.events() if e["rule"] and e["event"] == "answered"), None)

    answered = wait_until(renewal_answered, timeout=30, what="the renewal's late answer")
    renewal_sent = next(e["seq"] for e in faults.events() if e["rule"] and e["event"] == "sent")
    (first_completion, *_) = [
        e["seq"]
        for e in faults.events()
        if is_completion(e) and e["event"] == "sent" and e["seq"] > renewal_sent
    ]
    assert first_completion < answered
    record = run_record(db).to_dict()
    assert (record["status"], record["attempt_id"]) == ("completed", reply.json()["attempt_id"])
    assert record["renewed_at"] is not None
