"""The ledger's side of checkpoints, on the ledger in memory (function/exactly_once/testing/memory_store.py,
which passes the Firestore store's conformance suite): a renewal carries one, a takeover
inherits it, a release keeps it (rewriting the record as released instead of deleting it), a
completion drops it, and a released record is claimable at once by its own target only. Leases
run out by moving the store's clock, not by waiting."""

from __future__ import annotations

from typing import cast

import pytest
from google.cloud import firestore

from exactly_once.ledger.protocol import ClaimKind, LeaseLost, RunLedger, WrongTarget
from exactly_once.ledger.writes import StagedWrite, WriteKind
from exactly_once.testing.memory_store import LOST_ANSWER, MemoryRunStore, Operation, offline_client
from tests.support.ledger_runs import KEY, LEASE, RETENTION


@pytest.fixture
def store() -> MemoryRunStore:
    return MemoryRunStore()


@pytest.fixture
def ledger(store: MemoryRunStore) -> RunLedger:
    return RunLedger(store, lease=LEASE, retention=RETENTION, monotonic=store.clock.monotonic)


def fields(store: MemoryRunStore) -> dict[str, object] | None:
    return store.document(store.record_path(KEY.run_id))


def test_a_renewal_carries_the_checkpoint_and_a_takeover_inherits_it(store, ledger):
    first = ledger.claim(KEY, "first", target="svc")
    assert first.checkpoint_json is None
    store.clock.advance(10)
    ledger.renew(first, timeout=5, checkpoint_json='{"step":1}')
    assert (fields(store) or {})["checkpoint_json"] == '{"step":1}'

    store.clock.advance(LEASE.total_seconds())  # the holder died: its lease runs out
    taken = ledger.claim(KEY, "second", target="svc")

    assert (taken.kind, taken.checkpoint_json) == (ClaimKind.TOOK_OVER_LEASE, '{"step":1}')
    ledger.complete(taken)
    assert (fields(store) or {})["checkpoint_json"] is None


def test_a_release_with_a_checkpoint_keeps_the_record_and_the_next_claim_takes_it_at_once(store, ledger):
    failed = ledger.claim(KEY, "failed", target="svc")
    ledger.release(failed, checkpoint_json='{"step":2}')
    released = fields(store) or {}
    assert (released["status"], released["checkpoint_json"]) == ("released", '{"step":2}')

    with pytest.raises(WrongTarget):
        ledger.claim(KEY, "other-function", target="another-svc")
    retry = ledger.claim(KEY, "retry", target="svc")

    assert (retry.kind, retry.checkpoint_json) == (ClaimKind.RECLAIMED_RELEASED, '{"step":2}')
    assert (fields(store) or {})["status"] == "in_progress"
    with pytest.raises(LeaseLost):
        ledger.release(failed, checkpoint_json='{"step":3}')  # the old owner's is refused
    assert (fields(store) or {})["attempt_id"] == "retry"


def test_a_release_without_a_checkpoint_still_deletes_the_record(store, ledger):
    ledger.release(ledger.claim(KEY, "failed"))
    assert fields(store) is None
    assert ledger.claim(KEY, "retry").kind is ClaimKind.CREATED


def test_a_release_whose_answer_was_lost_is_recognised_and_applies_its_writes_once(store, ledger):
    counter = cast(firestore.DocumentReference, offline_client().collection("counters").document("releases"))
    store.commit([StagedWrite(WriteKind.SET, counter, {"n": 0})])
    claim = ledger.claim(KEY, "failed")
    store.script(Operation.UPDATE, LOST_ANSWER)

    ledger.release(
        claim,
        checkpoint_json='{"step":4}',
        also=[StagedWrite(WriteKind.UPDATE, counter, {"n": firestore.Increment(1)})],
    )

    assert store.scripted(Operation.UPDATE) == 0  # the lost answer happened
    assert store.document(counter.path) == {"n": 1}
    assert (fields(store) or {})["checkpoint_json"] == '{"step":4}'


def test_a_give_back_puts_back_the_checkpoint_the_claim_inherited(store, ledger):
    """A claim returned unrun (confirmed too late, the wrong forced-run identity, the job's lock
    refused it) leaves the run as it found it: released with what it inherited."""
    ledger.release(ledger.claim(KEY, "failed"), checkpoint_json='{"page":3}')
    taken = ledger.claim(KEY, "taken")
    ledger.give_back(taken)
    assert (fields(store) or {})["status"] == "released"
    assert ledger.claim(KEY, "next").checkpoint_json == '{"page":3}'
