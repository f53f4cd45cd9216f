"""A takeover whose commit answer is lost, through real Functions Framework servers whose own
Firestore client loses it (tests/support/faulty_instance.py): the emulator commits, the
client's call times out, the retry of the write is refused, the record read back is ours.

The claim's lease clock must start when that lost write was sent, not when the read found
it: the watchdog and the backstop count on it, and a lease counted from later would outlive
the real one. Scaled down: a 9 s lease (store deadline 4.5 s, 1.5 s per RPC), given up on
7.5 s after the claim was sent without a confirmed renewal.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import requests

from localrun.function_log import log_lines
from tests.support.crashed_runs import OTHER_RUN, crashed_run
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.faulty_instance import Faults, GoneWatch, instance_env, marks, warm_up
from tests.support.waiting import wait_until

LEASE_SECONDS = 9
# Delivered to each server before the faults are set.
# The takeover's update (a claim's write carries attempt_id), once.
LOSE_TAKEOVER = {"id": "lose", "rpc": "Commit", "fields": ["attempt_id"], "action": "lose", "times": 1}


def post(server, body: dict[str, Any]) -> requests.Response | None:
    try:
        return requests.post(server.url, headers=HEADERS, json=body, timeout=60)
    except requests.ConnectionError:
        return None  # the instance ended under it


def test_a_takeover_whose_answer_was_lost_is_answered_as_a_takeover_and_runs_once(
    function_servers, emulator_host, project, db, tmp_path, log_path
):
    crashed_run(db)
    faults = Faults(tmp_path / "faults.json")
    env = instance_env(emulator_host, project, faults, "marked_sleep", LEASE_SECONDS=str(LEASE_SECONDS))
    server = function_servers(env)
    warm_up(server.url, OTHER_RUN)
    faults.set([LOSE_TAKEOVER])

    reply = post(server, {"seconds": 0})

    assert reply is not None
    assert (reply.status_code, reply.json()["outcome"]) == (200, "lease_taken_over"), reply.text
    assert [event["event"] for event in faults.events() if event["rule"]] == ["sent", "lost"]
    (mark,) = marks(db, RUN_ID)
    record = run_record(db).to_dict()
    assert (record["status"], record["attempt_id"]) == ("completed", mark["attempt_id"])
    (line,) = [line for line in log_lines(log_path) if line.get("attempt_id") == mark["attempt_id"]]
    assert line["claim"] == "took_over_lease"
    again = post(server, {"seconds": 0})
    assert again is not None and again.json()["outcome"] == "duplicate_completed"
    assert len(marks(db, RUN_ID)) == 1


def test_the_attempt_whose_takeover_answer_was_lost_ends_before_its_real_lease_does(
    function_servers, emulator_host, project, db, tmp_path, log_path
):
    """After its claim, the attempt is cut off from Firestore (every RPC of its client fails),
    so no renewal is confirmed: its watchdog must end it before the lease its takeover really
    started runs out, which is when a retry at another instance takes the run over."""
    crashed_run(db)
    faults = Faults(tmp_path / "faults.json")
    env = instance_env(emulator_host, project, faults, "marked_sleep", LEASE_SECONDS=str(LEASE_SECONDS))
    cut_off = function_servers(env)
    warm_up(cut_off.url, OTHER_RUN)
    no_faults = Faults(tmp_path / "none.json")
    retrier = function_servers({**env, **instance_env(emulator_host, project, no_faults, "marked_sleep")})
    warm_up(retrier.url, {**OTHER_RUN, "X-CloudScheduler-JobName": "warm-up"})
    faults.set([LOSE_TAKEOVER])
    (worker,) = cut_off.worker_pids()
    answers: list[requests.Response | None] = []
    delivery = threading.Thread(target=lambda: answers.append(post(cut_off, {"seconds": 60})))
    delivery.start()
    (first,) = wait_until(
        lambda: marks(db, RUN_ID), timeout=30, what="the taking-over attempt's job to start"
    )
    faults.set([{"id": "cut", "rpc": "*", "action": "fail"}])
    gone = GoneWatch(db, worker, first["attempt_id"])
    taken: dict[str, Any] = run_record(db).to_dict() or {}
    assert taken["attempt_id"] == first["attempt_id"]
    takeover_commit = run_record(db).update_time

    def retried_past_in_progress() -> str | None:
        reply = post(retrier, {"seconds": 0})
        outcome = reply.json()["outcome"] if reply is not None else "no answer"
        return outcome if outcome != "in_progress" else None

    outcome = wait_until(retried_past_in_progress, timeout=60, what="the retry to take over", interval=0.05)
    delivery.join(timeout=60)

    assert outcome == "lease_taken_over"
    assert answers == [None]  # ended by its watchdog, unanswered
    ended = [line for line in log_lines(log_path) if line.get("event") == "attempt_ended"]
    assert [line["cause"] for line in ended] == ["renewal_failed"]
    # Gone before its lease could end, on Firestore's clock: the lease ran from the commit.
    assert gone.gone_at() < takeover_commit + timedelta(seconds=LEASE_SECONDS)
    by_attempt = {mark["attempt_id"]: mark for mark in marks(db, RUN_ID)}
    (retry,) = [mark for attempt, mark in by_attempt.items() if attempt != first["attempt_id"]]
    assert by_attempt[first["attempt_id"]].get("alive_at", first["started_at"]) < retry["started_at"]
    assert not by_attempt[first["attempt_id"]].get("finished") and retry.get("finished")
