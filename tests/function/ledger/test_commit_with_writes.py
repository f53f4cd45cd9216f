"""Other documents' writes committed with the run's own record, on the real emulator: applied
exactly when the completion (or release) commits, never by a stale owner, in one commit."""

from __future__ import annotations

from typing import cast

import pytest
from google.cloud import firestore

from exactly_once.ledger.protocol import LeaseLost, WritesRefused
from exactly_once.ledger.writes import StagedWrite, WriteKind
from localrun.firestore_rpcs import counted_emulator_client
from tests.support.ledger_runs import KEY, SHORT_LEASE, claim_when_free, ledger_on, record


def _report(db: firestore.Client, name: str = "report") -> firestore.DocumentReference:
    return cast(firestore.DocumentReference, db.collection("reports").document(name))


def test_writes_are_applied_with_the_completion(db):
    ledger = ledger_on(db)
    counter = db.collection("counters").document("runs")
    counter.set({"n": 1})
    claim = ledger.claim(KEY, "attempt-1")
    ledger.complete(
        claim,
        also=[
            StagedWrite(WriteKind.CREATE, _report(db), {"rows": 3}),
            StagedWrite(WriteKind.UPDATE, counter, {"n": firestore.Increment(1)}),
            StagedWrite(WriteKind.SET, _report(db, "merged"), {"a": 1}, merge=True),
        ],
    )
    assert record(db).to_dict()["status"] == "completed"
    assert _report(db).get().to_dict() == {"rows": 3}
    assert counter.get().to_dict() == {"n": 2}
    assert _report(db, "merged").get().to_dict() == {"a": 1}


def test_a_stale_owner_applies_none_of_its_writes(db):
    ledger = ledger_on(db, lease=SHORT_LEASE)
    stale = ledger.claim(KEY, "attempt-1")
    fresh = claim_when_free(ledger, "attempt-2")
    with pytest.raises(LeaseLost):
        ledger.complete(stale, also=[StagedWrite(WriteKind.CREATE, _report(db), {"by": "stale"})])
    with pytest.raises(LeaseLost):
        ledger.release(stale, also=[StagedWrite(WriteKind.SET, _report(db, "released"), {"by": "stale"})])
    assert not _report(db).get().exists
    assert not _report(db, "released").get().exists
    ledger.complete(fresh, also=[StagedWrite(WriteKind.CREATE, _report(db), {"by": "fresh"})])
    assert _report(db).get().to_dict() == {"by": "fresh"}


def test_a_refused_write_refuses_the_whole_commit_and_says_which(db):
    ledger = ledger_on(db)
    _report(db).set({"rows": 1})
    claim = ledger.claim(KEY, "attempt-1")
    before = record(db)
    with pytest.raises(WritesRefused) as refused:
        ledger.complete(
            claim,
            also=[
                StagedWrite(WriteKind.SET, _report(db, "other"), {"rows": 2}),
                StagedWrite(WriteKind.CREATE, _report(db), {"rows": 2}),
            ],
        )
    assert "reports/report" in refused.value.refusal
    after = record(db)
    assert (after.update_time, after.to_dict()["status"]) == (before.update_time, "in_progress")
    assert _report(db).get().to_dict() == {"rows": 1}
    assert not _report(db, "other").get().exists
    ledger.complete(claim)  # the run is still this attempt's to finish


def test_writes_ride_with_a_release(db):
    ledger = ledger_on(db)
    claim = ledger.claim(KEY, "attempt-1")
    ledger.release(claim, also=[StagedWrite(WriteKind.SET, _report(db), {"failures": 1})])
    assert not record(db).exists
    assert _report(db).get().to_dict() == {"failures": 1}


def test_a_completion_with_writes_is_still_one_commit(emulator_host, project):
    client, rpcs = counted_emulator_client(emulator_host, project)
    ledger = ledger_on(client)
    rpcs.reset()
    claim = ledger.claim(KEY, "attempt-1")
    ledger.complete(claim, also=[StagedWrite(WriteKind.CREATE, _report(client), {"rows": 3})])
    assert rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # create, complete with the write
