"""The claim/finish protocol on the real Firestore emulator, with a clock we control."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ledger import (
    ClaimKind,
    FirestoreRunStore,
    JobResult,
    LeaseLost,
    RunAlreadyCompleted,
    RunInProgress,
    RunLedger,
    StaleWrite,
)
from scheduler_request import RunKey

from localrun.firestore_rpcs import counted_emulator_client

LEASE = timedelta(seconds=70)
RETENTION = timedelta(hours=1)
KEY = RunKey("acme", "europe-west1", "nightly", datetime(2026, 10, 16, 12, tzinfo=UTC))


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 10, 16, 12, 0, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(db, clock) -> RunLedger:
    return RunLedger(FirestoreRunStore(db, "scheduler_runs"), lease=LEASE, retention=RETENTION, clock=clock)


def record(db, run_id=KEY.run_id):
    return db.collection("scheduler_runs").document(run_id).get()


def test_first_claim_creates_an_in_progress_record(ledger, db, clock):
    claim = ledger.claim(KEY, "attempt-1")
    assert claim.kind is ClaimKind.CREATED
    fields = record(db).to_dict()
    assert fields["status"] == "in_progress"
    assert fields["attempt_id"] == "attempt-1"
    assert fields["lease_expires"] == clock.now + LEASE
    assert fields["expire_at"] == clock.now + RETENTION
    assert (fields["job_name"], fields["project"], fields["location"]) == ("nightly", "acme", "europe-west1")
    assert fields["schedule_time"] == KEY.schedule_time


def test_complete_then_duplicate_is_refused(ledger, db):
    claim = ledger.claim(KEY, "attempt-1")
    ledger.complete(claim)
    fields = record(db).to_dict()
    assert (fields["status"], fields["result"]) == ("completed", "succeeded")
    assert fields["completed_at"] is not None
    with pytest.raises(RunAlreadyCompleted):
        ledger.claim(KEY, "attempt-2")


def test_live_lease_reports_seconds_left(ledger, clock):
    ledger.claim(KEY, "attempt-1")
    clock.advance(timedelta(seconds=30.5))
    with pytest.raises(RunInProgress) as caught:
        ledger.claim(KEY, "attempt-2")
    assert caught.value.retry_after_seconds == 40  # ceil(39.5)
    assert caught.value.holder == "attempt-1"


def test_expired_lease_is_taken_over_and_the_stale_owner_is_fenced(ledger, clock):
    stale = ledger.claim(KEY, "attempt-1")
    clock.advance(LEASE + timedelta(seconds=1))
    fresh = ledger.claim(KEY, "attempt-2")
    assert fresh.kind is ClaimKind.TOOK_OVER_LEASE
    assert fresh.fence > stale.fence
    with pytest.raises(LeaseLost):
        ledger.complete(stale)
    with pytest.raises(LeaseLost):
        ledger.release(stale)
    ledger.complete(fresh)


def test_release_deletes_so_the_next_attempt_claims_at_once(ledger, db):
    first = ledger.claim(KEY, "attempt-1")
    ledger.release(first)
    assert not record(db).exists
    second = ledger.claim(KEY, "attempt-2")
    assert second.kind is ClaimKind.CREATED
    assert second.fence > first.fence  # commit times grow across delete and re-create


def test_expired_record_counts_as_absent(ledger, clock):
    ledger.complete(ledger.claim(KEY, "attempt-1"))
    clock.advance(RETENTION + timedelta(seconds=1))  # TTL deletion has not happened yet
    claim = ledger.claim(KEY, "attempt-2")
    assert claim.kind is ClaimKind.RECLAIMED_EXPIRED


def test_takeover_resets_the_completion_fields(ledger, db, clock):
    ledger.complete(ledger.claim(KEY, "attempt-1"), JobResult.TERMINAL_FAILURE, "bad input")
    clock.advance(RETENTION + timedelta(seconds=1))
    ledger.claim(KEY, "attempt-2")
    fields = record(db).to_dict()
    assert fields["status"] == "in_progress"
    assert (fields["completed_at"], fields["result"], fields["error"]) == (None, None, None)


def test_terminal_failure_is_recorded_as_completed(ledger, db):
    ledger.complete(ledger.claim(KEY, "attempt-1"), JobResult.TERMINAL_FAILURE, "HTTP 404 from downstream")
    fields = record(db).to_dict()
    assert (fields["status"], fields["result"], fields["error"]) == (
        "completed",
        "terminal_failure",
        "HTTP 404 from downstream",
    )
    with pytest.raises(RunAlreadyCompleted) as caught:
        ledger.claim(KEY, "attempt-2")
    assert caught.value.result == "terminal_failure"


def test_a_retried_create_of_our_own_claim_is_still_ours(ledger, db):
    """The SDK retries a Commit whose response was lost; the second create then finds our own
    record. That must not turn into a 409 against ourselves."""
    first = ledger.claim(KEY, "attempt-1")
    again = ledger.claim(KEY, "attempt-1")
    assert again.update_time == first.update_time
    ledger.complete(again)


def test_a_retried_complete_that_had_committed_is_success(ledger):
    claim = ledger.claim(KEY, "attempt-1")
    ledger.complete(claim)
    ledger.complete(claim)  # update_time moved on, but the record shows our own completion


def test_losing_a_takeover_race_reads_again(db, clock):
    """Two retries see the same expired lease; the compare-and-swap lets only one win."""
    store = FirestoreRunStore(db, "scheduler_runs")
    ledger = RunLedger(store, lease=LEASE, retention=RETENTION, clock=clock)
    ledger.claim(KEY, "attempt-1")
    clock.advance(LEASE + timedelta(seconds=1))
    stale_view = store.get(KEY.run_id)
    assert stale_view is not None
    winner = ledger.claim(KEY, "attempt-2")
    assert winner.kind is ClaimKind.TOOK_OVER_LEASE

    # attempt-3 acts on the view it read before attempt-2 won: its write must be refused.
    with pytest.raises(StaleWrite):
        store.update(KEY.run_id, {"attempt_id": "attempt-3"}, if_updated_at=stale_view.update_time)
    with pytest.raises(RunInProgress):
        ledger.claim(KEY, "attempt-3")


@pytest.fixture
def counted(emulator_host, project, clock):
    """A ledger whose Firestore RPCs are counted on the wire, starting from zero."""
    client, rpcs = counted_emulator_client(emulator_host, project)
    ledger = RunLedger(
        FirestoreRunStore(client, "scheduler_runs"), lease=LEASE, retention=RETENTION, clock=clock
    )
    rpcs.reset()
    return ledger, rpcs


def test_happy_path_costs_two_rpcs_on_the_wire(counted):
    ledger, rpcs = counted
    ledger.complete(ledger.claim(KEY, "attempt-1"))
    assert rpcs.snapshot() == {"Commit": 2}

    rpcs.reset()
    with pytest.raises(RunAlreadyCompleted):
        ledger.claim(KEY, "attempt-2")
    assert rpcs.snapshot() == {"Commit": 1, "BatchGetDocuments": 1}  # failed create + one read


def test_failed_run_costs_two_rpcs_on_the_wire(counted):
    ledger, rpcs = counted
    ledger.release(ledger.claim(KEY, "attempt-1"))
    assert rpcs.snapshot() == {"Commit": 2}
