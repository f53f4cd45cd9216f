"""The ledger's side of checkpoints, on the emulator: a renewal carries one, a takeover
inherits it, a release keeps it (rewriting the record as released instead of deleting it), a
completion drops it, and a released record is claimable at once by its own target only."""

from __future__ import annotations

import pytest
from google.cloud import firestore

from exactly_once.ledger.protocol import ClaimKind, LeaseLost, WrongTarget
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.ledger.writes import StagedWrite, WriteKind
from tests.support.ledger_runs import KEY, SHORT_LEASE, claim_when_free, ledger_on, record


def test_a_renewal_carries_the_checkpoint_and_a_takeover_inherits_it(db):
    ledger = ledger_on(db, lease=SHORT_LEASE)
    first = ledger.claim(KEY, "first", target="svc")
    assert first.checkpoint_json is None
    ledger.renew(first, timeout=5, checkpoint_json='{"step":1}')
    assert record(db).to_dict()["checkpoint_json"] == '{"step":1}'

    taken = claim_when_free(ledger, "second")

    assert (taken.kind, taken.checkpoint_json) == (ClaimKind.TOOK_OVER_LEASE, '{"step":1}')
    ledger.complete(taken)
    assert record(db).to_dict()["checkpoint_json"] is None


def test_a_release_with_a_checkpoint_keeps_the_record_and_the_next_claim_takes_it_at_once(db):
    ledger = ledger_on(db)  # a 70 s lease: nothing here waits for one
    failed = ledger.claim(KEY, "failed", target="svc")
    ledger.release(failed, checkpoint_json='{"step":2}')
    released = record(db).to_dict()
    assert (released["status"], released["checkpoint_json"]) == ("released", '{"step":2}')

    with pytest.raises(WrongTarget):
        ledger.claim(KEY, "other-function", target="another-svc")
    retry = ledger.claim(KEY, "retry", target="svc")

    assert (retry.kind, retry.checkpoint_json) == (ClaimKind.RECLAIMED_RELEASED, '{"step":2}')
    assert record(db).to_dict()["status"] == "in_progress"
    with pytest.raises(LeaseLost):
        ledger.release(failed, checkpoint_json='{"step":3}')  # the old owner's is refused
    assert record(db).to_dict()["attempt_id"] == "retry"


def test_a_release_without_a_checkpoint_still_deletes_the_record(db):
    ledger = ledger_on(db)
    ledger.release(ledger.claim(KEY, "failed"))
    assert not record(db).exists
    assert ledger.claim(KEY, "retry").kind is ClaimKind.CREATED


class LosesReleaseAnswer(FirestoreRunStore):
    """The real store whose first release commits and then loses its answer: the caller sends
    it again and finds the record already released by itself."""

    def __init__(self, db: firestore.Client) -> None:
        super().__init__(db, "scheduler_runs")
        self.lost = 0

    def update(self, run_id, fields, *, if_updated_at, timeout, also=()):
        update_time = super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)
        if fields.get("status") == "released" and not self.lost:
            self.lost += 1
            return super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)
        return update_time


def test_a_release_whose_answer_was_lost_is_recognised_and_applies_its_writes_once(db):
    store = LosesReleaseAnswer(db)
    ledger = ledger_on(db, store=store)
    counter = db.collection("counters").document("releases")
    counter.set({"n": 0})
    claim = ledger.claim(KEY, "failed")

    ledger.release(
        claim,
        checkpoint_json='{"step":4}',
        also=[StagedWrite(WriteKind.UPDATE, counter, {"n": firestore.Increment(1)})],
    )

    assert store.lost == 1
    assert counter.get().to_dict() == {"n": 1}
    assert record(db).to_dict()["checkpoint_json"] == '{"step":4}'
