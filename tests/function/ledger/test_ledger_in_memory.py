"""Leases and retention running out, on the ledger in memory (function/exactly_once/testing/memory_store.py,
which passes the Firestore store's conformance suite): the store's clock is moved past a lease
or a retention instead of the test waiting for it on the emulator."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from exactly_once.ledger.protocol import ClaimKind, JobResult, LeaseLost, RunAlreadyCompleted, RunLedger
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
