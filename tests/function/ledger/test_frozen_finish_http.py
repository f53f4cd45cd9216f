"""A process frozen just before its completing write, through real Functions Framework
servers: the served function's own Firestore client stops its process (SIGSTOP) as the
completion is about to be sent (tests/support/faulty_instance.py); a retry at another
instance takes the run over once the lease has ended; the test thaws the frozen process.

Its completion is refused (the record changed), and the read that tells whose change it was
gets a budget of its own: the completion's was spent while the process was frozen. The
answer is lease_lost, which is what happened, not store_error. A 9 s lease, scaled down.
"""

from __future__ import annotations

import threading
from typing import Any

import requests

from tests.support.crashed_runs import OTHER_RUN
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.faulty_instance import Faults, instance_env, marks, process_stopped, warm_up
from tests.support.waiting import wait_until

FREEZE_COMPLETION = {
    "id": "freeze",
    "rpc": "Commit",
    "fields": ["completed_at"],
    "action": "freeze",
    "times": 1,
}


def post(server, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url, headers=HEADERS, json=body, timeout=90)


def test_a_completion_thawed_after_a_takeover_is_answered_lease_lost(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    env = instance_env(emulator_host, project, faults, "marked_sleep", LEASE_SECONDS="9")
    frozen = function_servers(env)
    warm_up(frozen.url, OTHER_RUN)
    retrier = function_servers({**env, **Faults(tmp_path / "none.json").env})
    warm_up(retrier.url, {**OTHER_RUN, "X-CloudScheduler-JobName": "warm-up"})
    faults.set([FREEZE_COMPLETION])
    (worker,) = frozen.worker_pids()
    answers: list[requests.Response] = []
    delivery = threading.Thread(target=lambda: answers.append(post(frozen, {"seconds": 0})))
    delivery.start()
    try:
        wait_until(lambda: process_stopped(worker), timeout=30, what="the completing process to freeze")

        def retried_past_in_progress() -> str | None:
            outcome = str(post(retrier, {"seconds": 0}).json()["outcome"])
            return outcome if outcome != "in_progress" else None

        outcome = wait_until(
            retried_past_in_progress, timeout=60, what="the retry to take over", interval=0.1
        )
    finally:
        faults.thaw(worker)
    delivery.join(timeout=60)

    assert outcome == "lease_taken_over"
    (answer,) = answers
    assert (answer.status_code, answer.json()["outcome"]) == (409, "lease_lost"), answer.text
    record = run_record(db).to_dict()
    finished = {mark["attempt_id"] for mark in marks(db, RUN_ID) if mark.get("finished")}
    assert finished == {answer.json()["attempt_id"], record["attempt_id"]}  # ran, then the retry did
    assert record["status"] == "completed" and record["attempt_id"] != answer.json()["attempt_id"]
