"""Where a give-back and a release leave a run, through real Functions Framework servers whose
own Firestore client is faulted (tests/support/faulty_instance.py).

- A claim confirmed past the store deadline is given back unrun, and the run keeps the
  checkpoint the claim inherited: the next attempt resumes from it.
- A release whose answer is lost while the next delivery claims the run committed: the
  releasing attempt is answered `failed_released` (what happened), never `lease_lost`.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import requests

from exactly_once.ledger.store import MAX_STORE_DEADLINE_SECONDS
from tests.support.crashed_runs import OTHER_RUN
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.faulty_instance import Faults, instance_env, marks, process_stopped, warm_up
from tests.support.waiting import wait_until

# Frozen before its takeover is sent, for longer than a claim may wait for Firestore.
FREEZE_TAKEOVER = {"id": "freeze", "rpc": "Commit", "fields": ["attempt_id"], "action": "freeze", "times": 1}
# The answer of the release's commit (it carries the job's failure to its status document).
LOSE_RELEASE = {"id": "lose", "rpc": "Commit", "fields": ["last_failure"], "action": "lose", "times": 1}


def post(url: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(url, headers=HEADERS, json=body, timeout=120)


def test_a_claim_confirmed_too_late_gives_the_run_back_with_its_checkpoint(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(instance_env(emulator_host, project, faults, "checkpointed"))
    warm_up(server.url, OTHER_RUN)
    failed = post(server.url, {"save": {"step": 1}, "fail": True})
    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed_released"), failed.text
    assert run_record(db).to_dict()["checkpoint_json"] == '{"step":1}'

    faults.set([FREEZE_TAKEOVER])
    (worker,) = server.worker_pids()
    answers: list[requests.Response] = []
    delivery = threading.Thread(target=lambda: answers.append(post(server.url, {})))
    delivery.start()
    try:
        wait_until(lambda: process_stopped(worker), timeout=60, what="the taking process to freeze")
        frozen_until = time.monotonic() + MAX_STORE_DEADLINE_SECONDS + 1
        wait_until(lambda: time.monotonic() >= frozen_until, timeout=30, what="the store deadline to pass")
    finally:
        faults.thaw(worker)
    delivery.join(timeout=60)

    (late,) = answers
    assert (late.status_code, late.json()["outcome"]) == (500, "store_error"), late.text
    assert "too late" in late.json()["message"]
    record = run_record(db).to_dict()
    assert (record["status"], record["checkpoint_json"]) == ("released", '{"step":1}')
    faults.set([])
    resumed = post(server.url, {})
    assert (resumed.status_code, resumed.json()["outcome"]) == (200, "executed"), resumed.text
    assert resumed.json()["output"] == {"resumed_from": {"step": 1}}


@pytest.mark.parametrize(
    ("body", "released"),
    [({"fail": "first"}, None), ({"save": {"step": 1}, "fail": "first"}, '{"step":1}')],
    ids=["deleted", "released-with-checkpoint"],
)
def test_a_release_whose_answer_is_lost_while_the_next_delivery_claims_is_a_release(
    function_servers, emulator_host, project, db, tmp_path, body, released
):
    faults = Faults(tmp_path / "faults.json")
    releasing = function_servers(instance_env(emulator_host, project, faults, "checkpointed"))
    next_one = function_servers(
        instance_env(emulator_host, project, Faults(tmp_path / "none.json"), "checkpointed")
    )
    warm_up(releasing.url, OTHER_RUN)
    warm_up(next_one.url, {**OTHER_RUN, "X-CloudScheduler-JobName": "warm-up"})
    faults.set([LOSE_RELEASE])
    answers: list[requests.Response] = []
    first = threading.Thread(target=lambda: answers.append(post(releasing.url, body)))
    first.start()

    def given_back() -> bool:
        snapshot = run_record(db)
        return (
            (snapshot.to_dict() or {}).get("checkpoint_json") == released
            if snapshot.exists
            else released is None
        )

    def release_sent() -> bool:
        return any(event["rule"] == "lose" for event in faults.events())

    # The release was sent and committed; its answer is being lost (the client waits out the
    # call's timeout, then retries).
    wait_until(release_sent, timeout=60, what="the release to be sent", interval=0.02)
    wait_until(given_back, timeout=60, what="the release to commit", interval=0.02)
    second = post(next_one.url, body)
    first.join(timeout=60)

    assert (second.status_code, second.json()["outcome"]) == (200, "executed"), second.text
    assert second.json()["output"] == {"resumed_from": json.loads(released) if released else None}
    (answer,) = answers
    assert (answer.status_code, answer.json()["outcome"]) == (500, "failed_released"), answer.text
    assert [event["event"] for event in faults.events() if event["rule"] == "lose"] == ["sent", "lost"]
    record = run_record(db).to_dict()
    assert (record["status"], record["attempt_id"]) == ("completed", second.json()["attempt_id"])
    assert len(marks(db, RUN_ID)) == 2  # the failed attempt, then the one that ran it
