"""Leases and retention running out, on the ledger in memory (function/exactly_once/testing/memory_store.py,
which passes the Firestore store's conformance suite): the store's clock is moved past a lease
or a retention instead of the test waiting for it on the emulator."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from google.api_core import exceptions as google_exceptions

from exactly_once.ledger.protocol import ClaimKind, JobResult, LeaseLost, RunAlreadyCompleted, RunLedger
from exactly_once.ledger.store import store_deadline_for
from exactly_once.testing.faults import OUTAGE, Operation
from exactly_once.testing.memory_store import MemoryRunStore
from tests.support.ledger_runs import KEY

SHORT = timedelta(seconds=2)


@pytest.fixture
def store() -> MemoryRunStore:
    return MemoryRunStore()


def ledger_on(store: MemoryRunStore, *, retention: timedelta = timedelta(hours=1)) -> RunLedger:
    return RunLedger(store, lease=SHORT, retention=retention, monotonic=store.clock.monotonic)


def test_expired_lease_is_taken_over_and_the_stale_owner_is_fenced(store):
    ledger = ledger_on(store)
    stale = ledger.claim(KEY, "attempt-1")
    store.clock.advance(SHORT.total_seconds())
    fresh = ledger.claim(KEY, "attempt-2")
    assert fresh.kind is ClaimKind.TOOK_OVER_LEASE
    assert fresh.update_time >= stale.update_time + SHORT
    assert fresh.fence > stale.fence
    with pytest.raises(LeaseLost):
        ledger.complete(stale)
    with pytest.raises(LeaseLost):
        ledger.release(stale)
    ledger.complete(fresh)


def test_expired_record_counts_as_absent(store):
    """Past expire_at (on Firestore's clock) but not yet deleted by TTL: a new run."""
    ledger = ledger_on(store, retention=SHORT)
    ledger.complete(ledger.claim(KEY, "attempt-1"))
    with pytest.raises(RunAlreadyCompleted):
        ledger.claim(KEY, "too-early")
    store.clock.advance(SHORT.total_seconds())
    assert ledger.claim(KEY, "attempt-2").kind is ClaimKind.RECLAIMED_EXPIRED


def test_takeover_resets_the_completion_fields(store):
    ledger = ledger_on(store, retention=SHORT)
    ledger.complete(
        ledger.claim(KEY, "attempt-1"), JobResult.TERMINAL_FAILURE, "bad input", output_json="[1]"
    )
    store.clock.advance(SHORT.total_seconds())
    ledger.claim(KEY, "attempt-2")
    fields = store.document(store.record_path(KEY.run_id)) or {}
    assert fields["status"] == "in_progress"
    assert (fields["completed_at"], fields["result"], fields["error"]) == (None, None, None)
    assert fields["output_json"] is None


def test_a_run_claimed_ahead_of_its_schedule_time_is_retained_from_that_time(store):
    """A delivery reaching Firestore within the forced-run tolerance before its ScheduleTime is
    the scheduled run. Retained only from its claim, its record would expire before the run
    leaves a catch-up window as long as the retention, and catch-up would deliver it again."""
    retention = timedelta(seconds=60)
    ledger = ledger_on(store, retention=retention)
    key = replace(KEY, schedule_time=store.clock.now() + timedelta(seconds=3.9))
    claim = ledger.claim(key, "early")
    assert claim.update_time < key.schedule_time
    ledger.complete(claim)
    fields = store.document(store.record_path(key.run_id)) or {}
    assert fields["expire_at"] == key.schedule_time + retention
    # A delivery at the claim's retention end, inside the ScheduleTime's, is still a duplicate.
    store.clock.advance(retention.total_seconds())
    with pytest.raises(RunAlreadyCompleted):
        ledger.claim(key, "retry")


@pytest.fixture
def timed() -> MemoryRunStore:
    """A store whose tries take what FirestoreRunStore's would under SHORT's store deadline."""
    return MemoryRunStore(deadline_seconds=store_deadline_for(SHORT).total_seconds())


def test_the_write_that_ends_a_run_waits_out_an_outage_while_the_lease_lasts(timed):
    """Firestore down for longer than an operation may wait (the store deadline, half a lease)
    just as a job has run: the completion keeps trying while no retry can take the run over,
    and commits. Given up at the store deadline, it would leave the run to a retry that runs
    the job again."""
    ledger = ledger_on(timed)
    claim = ledger.claim(KEY, "attempt-1")
    outage = ledger.deadline_seconds * 1.5
    assert outage < SHORT.total_seconds()
    timed.script(Operation.UPDATE, OUTAGE(outage))
    ledger.complete(claim)
    assert (timed.document(timed.record_path(KEY.run_id)) or {})["status"] == "completed"
    assert outage <= timed.clock.monotonic() - claim.sent_at < SHORT.total_seconds()


def test_a_claim_given_back_unrun_waits_for_firestore_no_longer_than_the_store_deadline(timed):
    """Nothing ran, so nothing is lost when the give-back fails: the run waits out its lease."""
    ledger = ledger_on(timed)
    claim = ledger.claim(KEY, "attempt-1")
    timed.script(Operation.DELETE, OUTAGE(ledger.deadline_seconds * 1.5))
    with pytest.raises(google_exceptions.ServiceUnavailable):
        ledger.give_back(claim)
    assert timed.clock.monotonic() - claim.sent_at <= ledger.deadline_seconds
    assert (timed.document(timed.record_path(KEY.run_id)) or {})["status"] == "in_progress"


def test_the_write_that_ends_a_run_gives_up_once_the_lease_has_ended(timed):
    ledger = ledger_on(timed)
    claim = ledger.claim(KEY, "attempt-1")
    timed.script(Operation.UPDATE, OUTAGE(SHORT.total_seconds() * 2))
    with pytest.raises(google_exceptions.ServiceUnavailable):
        ledger.complete(claim)
    assert ledger.deadline_seconds < timed.clock.monotonic() - claim.sent_at <= SHORT.total_seconds()
    assert (timed.document(timed.record_path(KEY.run_id)) or {})["status"] == "in_progress"
