"""Checkpoints through real Functions Framework servers on the emulator: carried by a lease
renewal, inherited by the attempt that takes over a run whose attempt died, kept by a
release, dropped by a completion."""

from __future__ import annotations

import json

import requests

from tests.support.demo_runs import HEADERS, run_record
from tests.support.effect_jobs import effect_env
from tests.support.faulty_instance import Faults
from tests.support.waiting import wait_until

# Renewed every 2 s: the first renewal comes soon, and a dead attempt's lease ends soon after.
LEASE_SECONDS = "6"


def post(server) -> requests.Response:
    return requests.post(server.url, headers=HEADERS, data=b"", timeout=90)


def test_a_checkpoint_renewed_before_a_crash_is_what_the_attempt_taking_over_resumes_from(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    env = effect_env(emulator_host, project, faults, "checkpoint_then_die", LEASE_SECONDS=LEASE_SECONDS)
    dying, other = function_servers(env), function_servers(env)

    try:
        post(dying)
    except requests.ConnectionError:
        pass  # the attempt's process exited under the request: no answer
    else:
        raise AssertionError("the dying attempt was answered")
    record = run_record(db).to_dict()
    assert (record["status"], json.loads(record["checkpoint_json"])) == ("in_progress", {"step": 1})
    # On the wire: the claim, then renewals; the first carries the checkpoint in its own write.
    sent = [(e["rpc"], e["fields"]) for e in faults.events() if e["event"] == "sent"]
    assert sent[0][0] == "BatchWrite" and {rpc for rpc, _ in sent[1:]} == {"Commit"}, sent
    assert sent[1] == ("Commit", ["checkpoint_json", "renewed_at"]), sent

    def taken_over() -> requests.Response | None:
        reply = post(other)
        return reply if reply.status_code != 409 else None

    reply = wait_until(taken_over, timeout=60, what="the dead attempt's lease to end", interval=0.25)

    assert (reply.status_code, reply.json()["outcome"]) == (200, "lease_taken_over"), reply.text
    assert reply.json()["output"] == {"resumed_from": {"step": 1}}
    completed = run_record(db).to_dict()
    assert (completed["status"], completed["checkpoint_json"]) == ("completed", None)


def test_a_released_run_keeps_its_checkpoint_for_the_retry_which_runs_at_once(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "checkpoint_then_fail"))

    failed = post(server)

    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed_released"), failed.text
    # The release is one commit, as a delete would be: the record rewritten with the checkpoint,
    # and the merge of the job's status (its last failure) beside it.
    sent = [(e["rpc"], e["fields"]) for e in faults.events() if e["event"] == "sent"]
    assert [rpc for rpc, _ in sent] == ["BatchWrite", "Commit"], sent
    assert {"checkpoint_json", "status", "last_failure", "consecutive_failures"} <= set(sent[1][1]), sent
    record = run_record(db).to_dict()
    assert (record["status"], json.loads(record["checkpoint_json"])) == ("released", {"step": 2})
    before = max(e["seq"] for e in faults.events())
    retried = post(server)  # at once: a released record waits for no lease
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed"), retried.text
    # The released record costs the claim a read and a takeover beside its refused create.
    claimed = [e["rpc"] for e in faults.events() if e["seq"] > before and e["event"] == "sent"]
    assert claimed == ["BatchWrite", "BatchGetDocuments", "Commit", "Commit"], claimed
    assert retried.json()["output"] == {"resumed_from": {"step": 2}}
    completed = run_record(db).to_dict()
    assert (completed["status"], completed["checkpoint_json"]) == ("completed", None)
    assert post(server).json()["outcome"] == "duplicate_completed"
