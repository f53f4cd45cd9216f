"""A slow Firestore, and a takeover given up on after its write committed, through a real
Functions Framework server whose own Firestore client holds every answer back
(tests/support/faulty_instance.py). The stack's 30 s lease: a ledger operation may wait 10 s
for Firestore, and one RPC a third of that, 3.3 s, however late in the operation it is sent.
"""

from __future__ import annotations

from typing import Any

import requests

from localrun.function_log import log_lines
from tests.support.crashed_runs import OTHER_RUN, crashed_run
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.faulty_instance import Faults, instance_env, marks, warm_up

# Each answer this late: the takeover's update is the third RPC of its claim, sent 4.4 s in.
LATE_SECONDS = 2.2


def post(server, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url, headers=HEADERS, json=body, timeout=90)


def test_with_every_answer_late_a_crashed_run_is_taken_over_and_run_once(
    function_servers, emulator_host, project, db, tmp_path
):
    crashed_run(db)
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(instance_env(emulator_host, project, faults, "marked_sleep"))
    warm_up(server.url, OTHER_RUN)
    faults.set([{"id": "slow", "rpc": "*", "action": "delay", "seconds": LATE_SECONDS}])

    reply = post(server, {"seconds": 0})

    assert (reply.status_code, reply.json()["outcome"]) == (200, "lease_taken_over"), reply.text
    assert {event["event"] for event in faults.events() if event["rule"]} == {"sent", "answered"}
    (mark,) = marks(db, RUN_ID)
    record = run_record(db).to_dict()
    assert (record["status"], record["attempt_id"]) == ("completed", mark["attempt_id"])
    again = post(server, {"seconds": 0})
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")
    assert len(marks(db, RUN_ID)) == 1


def test_a_takeover_given_up_after_its_write_committed_is_continued_by_the_next_delivery(
    function_servers, emulator_host, project, db, tmp_path, log_path
):
    """The takeover's update commits and its answer is lost; then Firestore is cut off, so
    the claim ends store_error with its write in the record. Firestore back, the next delivery
    to the instance recognises that write as its instance's, and takes the run at once rather
    than answering in_progress until the lease the abandoned claim wrote has run out."""
    crashed_run(db)
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(instance_env(emulator_host, project, faults, "marked_sleep"))
    warm_up(server.url, OTHER_RUN)
    faults.set(
        [
            {"id": "lose", "rpc": "Commit", "fields": ["attempt_id"], "action": "lose", "times": 1},
            {"id": "cut", "rpc": "*", "action": "fail", "after": "lose"},
        ]
    )

    given_up = post(server, {"seconds": 0})
    assert (given_up.status_code, given_up.json()["outcome"]) == (500, "store_error"), given_up.text
    abandoned = given_up.json()["attempt_id"]
    assert run_record(db).to_dict()["attempt_id"] == abandoned  # its write did commit
    faults.set([])

    reply = post(server, {"seconds": 0})

    assert (reply.status_code, reply.json()["outcome"]) == (200, "lease_taken_over"), reply.text
    (mark,) = marks(db, RUN_ID)
    record = run_record(db).to_dict()
    assert (record["status"], record["attempt_id"]) == ("completed", mark["attempt_id"])
    assert mark["attempt_id"] == reply.json()["attempt_id"] != abandoned
    lines = [line for line in log_lines(log_path) if line.get("attempt_id") == mark["attempt_id"]]
    assert [line["claim"] for line in lines] == ["took_over_lease"]
