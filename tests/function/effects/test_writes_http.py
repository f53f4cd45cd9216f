"""context.writes through real Functions Framework servers on the emulator: the staged writes
ride in the run's completing commit, so they are applied with it and only with it. The
instance's Firestore client is counted and cut on the wire (tests/support/faulty_instance.py)."""

from __future__ import annotations

import threading

import requests

from exactly_once.run_writes import MAX_STAGED_WRITES
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.effect_jobs import GO, REPORTS, STARTED, effect_env
from tests.support.faulty_instance import Faults, is_completion
from tests.support.waiting import wait_until

OTHER = {**HEADERS, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:15:00Z"}


def post(server, body: dict[str, object] | None = None, headers=HEADERS) -> requests.Response:
    return requests.post(server.url, headers=headers, json=body or {}, timeout=90)


def report(db, run_id: str = RUN_ID) -> dict[str, object] | None:
    snapshot = db.collection(REPORTS).document(run_id).get()
    return snapshot.to_dict() if snapshot.exists else None


def sent_rpcs(faults: Faults, after: int) -> list[tuple[str, list[str]]]:
    return [(e["rpc"], e["fields"]) for e in faults.events() if e["seq"] > after and e["event"] == "sent"]


def last_seq(faults: Faults) -> int:
    return max((e["seq"] for e in faults.events()), default=0)


def test_a_staged_write_commits_with_the_completion_in_two_rpcs(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "stage_report"))
    post(server, headers=OTHER)  # the instance's channel is up: the run below is counted alone
    before = last_seq(faults)

    reply = post(server)

    assert (reply.status_code, reply.json()["outcome"]) == (200, "executed"), reply.text
    assert report(db) == {"runs": 1, "run_id": RUN_ID}
    assert run_record(db).to_dict()["status"] == "completed"
    rpcs = sent_rpcs(faults, before)
    assert [rpc for rpc, _ in rpcs] == ["BatchWrite", "Commit"], rpcs
    assert {"completed_at", "run_id", "runs"} <= set(rpcs[1][1])  # the report rode in the completion
    assert post(server).json()["outcome"] == "duplicate_completed"
    assert report(db) == {"runs": 1, "run_id": RUN_ID}


def test_a_run_taken_over_while_its_job_ran_leaves_no_staged_write(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "stage_report", LEASE_SECONDS="60"))
    replies: list[requests.Response] = []
    holding = threading.Thread(target=lambda: replies.append(post(server, {"hold": True})))
    holding.start()
    wait_until(lambda: list(db.collection(STARTED).stream()), timeout=60, what="the job to start")
    # Another attempt takes the run over: the record is no longer this attempt's.
    db.collection("scheduler_runs").document(RUN_ID).update({"attempt_id": "rival"})
    db.collection(GO).document(RUN_ID).set({})
    holding.join(timeout=90)

    (reply,) = replies
    assert (reply.status_code, reply.json()["outcome"]) == (409, "lease_lost"), reply.text
    assert report(db) is None
    assert run_record(db).to_dict()["attempt_id"] == "rival"


def test_a_completion_cut_off_applies_no_staged_write_and_the_retry_applies_it_once(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "stage_report", LEASE_SECONDS="6"))
    post(server, headers=OTHER)
    faults.set([{"id": "cut", "rpc": "Commit", "fields": ["completed_at"], "action": "fail"}])

    cut = post(server)

    assert (cut.status_code, cut.json()["outcome"]) == (500, "store_error"), cut.text
    assert any(is_completion(e) and e["event"] == "failed" for e in faults.events())
    assert report(db) is None
    assert run_record(db).to_dict()["status"] == "in_progress"
    faults.set([])

    def retried() -> requests.Response | None:
        reply = post(server)
        return reply if reply.status_code != 409 else None

    reply = wait_until(retried, timeout=60, what="the cut attempt's lease to end", interval=0.25)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "lease_taken_over"), reply.text
    assert report(db) == {"runs": 1, "run_id": RUN_ID}
    assert post(server).json()["outcome"] == "duplicate_completed"
    assert report(db) == {"runs": 1, "run_id": RUN_ID}


def test_more_writes_than_a_commit_holds_are_refused_when_staged_and_nothing_is_written(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "stage_many"))

    reply = post(server, {"count": MAX_STAGED_WRITES + 1})

    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal"), reply.text
    error = reply.json()["error"]
    assert f"at most {MAX_STAGED_WRITES} writes" in error and f"write {MAX_STAGED_WRITES + 1}" in error
    assert list(db.collection(REPORTS).limit(1).stream()) == []
    # As many as fit commit with the run.
    fits = post(server, {"count": MAX_STAGED_WRITES}, headers=OTHER)
    assert (fits.status_code, fits.json()["output"]) == (200, {"staged": MAX_STAGED_WRITES}), fits.text
    assert len(list(db.collection(REPORTS).stream())) == MAX_STAGED_WRITES


def test_a_write_to_another_database_is_refused_when_staged(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "stage_many"))

    reply = post(server, {"database": "elsewhere"})

    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal"), reply.text
    assert "not in the ledger's database" in reply.json()["error"]
    assert "databases/elsewhere" in reply.json()["error"]


def test_a_write_firestore_refuses_fails_the_run_terminally_with_none_applied(
    function_servers, emulator_host, project, db, tmp_path
):
    db.collection(REPORTS).document("taken").set({"n": 0})
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "stage_many"))

    reply = post(server, {"existing": "taken"})

    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal"), reply.text
    assert not db.collection(REPORTS).document("fresh").get().exists
    assert db.collection(REPORTS).document("taken").get().to_dict() == {"n": 0}
    record = run_record(db).to_dict()
    assert (record["status"], record["result"]) == ("completed", "terminal_failure")


def test_a_value_only_firestore_refuses_fails_the_run_terminally_with_none_applied(
    function_servers, emulator_host, project, db, tmp_path
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(effect_env(emulator_host, project, faults, "stage_many"))

    reply = post(server, {"deep": 25})

    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal"), reply.text
    assert "nested" in reply.json()["error"]
    assert not db.collection(REPORTS).document("fresh").get().exists
    assert not db.collection(REPORTS).document("deep").get().exists
    assert post(server).json()["outcome"] == "duplicate_completed"  # recorded: never retried
