"""The claim/finish protocol on the real Firestore emulator.

Leases run on Firestore's clock, so a lease expires here by real time passing (short leases,
waited on with deadlines); the injectable clock is the instance's wall clock, which tests
skew to show that no decision depends on it.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from exactly_once.ledger.protocol import (
    Claim,
    ClaimKind,
    ClaimTooLate,
    JobResult,
    RunAlreadyCompleted,
    RunInProgress,
    RunLedger,
)
from exactly_once.ledger.store import FirestoreRunStore, StaleWrite
from exactly_once.run_key import RunKey
from localrun.firestore_rpcs import counted_emulator_client
from tests.support.clock import FakeClock
from tests.support.ledger_runs import (
    KEY,
    LEASE,
    RETENTION,
    SHORT_LEASE,
    DelayedCreate,
    claim_when_free,
    ledger_on,
    record,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(db, clock) -> RunLedger:
    return RunLedger(FirestoreRunStore(db, "scheduler_runs"), lease=LEASE, retention=RETENTION, clock=clock)


def test_first_claim_creates_an_in_progress_record(ledger, db, clock):
    claim = ledger.claim(KEY, "attempt-1")
    assert claim.kind is ClaimKind.CREATED
    snapshot = record(db)
    fields = snapshot.to_dict()
    assert fields["status"] == "in_progress"
    assert fields["attempt_id"] == "attempt-1"
    assert fields["lease_seconds"] == LEASE.total_seconds()
    # The lease runs from the commit; claimed_at records it on Firestore's clock (the
    # emulator resolves the transform when it receives the write, a little before it commits).
    assert snapshot.update_time == claim.update_time
    assert timedelta(0) <= claim.update_time - fields["claimed_at"] < timedelta(seconds=5)
    assert claim.lease_expires == claim.update_time + LEASE
    assert fields["expire_at"] == clock.now + RETENTION
    assert (fields["job_name"], fields["project"], fields["location"]) == ("nightly", "acme", "europe-west1")
    assert fields["schedule_time"] == KEY.schedule_time


def test_complete_then_duplicate_is_refused(ledger, db):
    claim = ledger.claim(KEY, "attempt-1")
    ledger.complete(claim)
    fields = record(db).to_dict()
    assert (fields["status"], fields["result"]) == ("completed", "succeeded")
    assert fields["completed_at"] > claim.update_time
    assert fields["expire_at"] == claim.update_time + RETENTION  # retention on Firestore's clock
    with pytest.raises(RunAlreadyCompleted):
        ledger.claim(KEY, "attempt-2")


def test_live_lease_reports_seconds_left(ledger, clock):
    ledger.claim(KEY, "attempt-1")
    clock.advance(timedelta(seconds=30))  # the instance's clock: no effect on the answer
    with pytest.raises(RunInProgress) as caught:
        ledger.claim(KEY, "attempt-2")
    assert 65 <= caught.value.retry_after_seconds <= 70
    assert caught.value.holder == "attempt-1"


@pytest.mark.parametrize("skew", [timedelta(seconds=120), timedelta(seconds=-120), timedelta(days=-400)])
def test_skewed_instance_clocks_decide_nothing(db, skew):
    """An instance whose clock is fast or slow neither takes over a live lease nor shortens
    or stretches Retry-After; one a year behind cannot make a completed run expire."""
    honest, skewed = ledger_on(db), ledger_on(db, clock=FakeClock(skew))
    for first, second in ((honest, skewed), (skewed, honest)):
        run = RunKey("acme", "europe-west1", f"job-{first is honest}", KEY.schedule_time)
        claim = first.claim(run, "attempt-1")
        with pytest.raises(RunInProgress) as caught:
            second.claim(run, "attempt-2")
        assert 60 <= caught.value.retry_after_seconds <= 70
        first.complete(claim)
        with pytest.raises(RunAlreadyCompleted):
            second.claim(run, "attempt-3")


def test_release_deletes_so_the_next_attempt_claims_at_once(ledger, db):
    first = ledger.claim(KEY, "attempt-1")
    ledger.release(first)
    assert not record(db).exists
    second = ledger.claim(KEY, "attempt-2")
    assert second.kind is ClaimKind.CREATED
    assert second.fence > first.fence  # commit times grow across delete and re-create


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
    """A create whose response was lost is sent again; the second create then finds our own
    record. That must not turn into a 409 against ourselves."""
    first = ledger.claim(KEY, "attempt-1")
    again = ledger.claim(KEY, "attempt-1")
    assert again.update_time == first.update_time
    ledger.complete(again)


def test_a_retried_complete_that_had_committed_is_success(ledger):
    claim = ledger.claim(KEY, "attempt-1")
    ledger.complete(claim, output_json='{"rows": 1}')
    # update_time moved on, but the record shows our own completion: no LeaseLost, nothing rewritten
    ledger.complete(claim, output_json='{"rows": 2}')
    with pytest.raises(RunAlreadyCompleted) as done:
        ledger.claim(KEY, "attempt-2")
    assert (done.value.result, done.value.output_json) == (JobResult.SUCCEEDED, '{"rows": 1}')


def test_losing_a_takeover_race_reads_again(db):
    """Two retries see the same expired lease; the compare-and-swap lets only one win."""
    store = FirestoreRunStore(db, "scheduler_runs")
    ledger = ledger_on(db, store=store, lease=SHORT_LEASE)
    ledger.claim(KEY, "attempt-1")
    stale_view = store.get(KEY.run_id, timeout=5)
    assert stale_view is not None
    winner = claim_when_free(ledger, "attempt-2")
    assert winner.kind is ClaimKind.TOOK_OVER_LEASE

    # attempt-3 acts on the view it read before attempt-2 won: its write must be refused.
    with pytest.raises(StaleWrite):
        store.update(KEY.run_id, {"attempt_id": "attempt-3"}, if_updated_at=stale_view.update_time, timeout=5)
    with pytest.raises(RunInProgress):
        ledger.claim(KEY, "attempt-3")


def test_a_claim_answered_after_its_lease_never_starts_the_job(db):
    """The create commits, its answer arrives after the lease ran out and another attempt
    took over: the late claimer must not run the job, and must not disturb the new owner."""
    slow_store = DelayedCreate(db, "scheduler_runs")
    slow, healthy = ledger_on(db, store=slow_store, lease=SHORT_LEASE), ledger_on(db, lease=SHORT_LEASE)
    outcome: list[BaseException | Claim] = []

    def slow_claim() -> None:
        try:
            outcome.append(slow.claim(KEY, "slow"))
        except BaseException as error:  # recorded and asserted below
            outcome.append(error)

    thread = threading.Thread(target=slow_claim)
    thread.start()
    assert slow_store.committed.wait(timeout=20)
    winner = claim_when_free(healthy, "healthy")
    slow_store.answer.set()
    thread.join(timeout=30)
    assert isinstance(outcome[0], ClaimTooLate), outcome
    assert winner.kind is ClaimKind.TOOK_OVER_LEASE
    assert record(db).to_dict()["attempt_id"] == "healthy"
    healthy.complete(winner)


def test_a_late_claim_without_a_rival_is_released_for_the_next_retry(db):
    slow_store = DelayedCreate(db, "scheduler_runs")
    slow_store.answer.set()
    # Deadline = min(10 s, lease / 2): a 1 s answer is late for a 1 s lease.
    slow = ledger_on(db, store=slow_store, lease=timedelta(seconds=1))
    slow_store.answer.clear()
    timer = threading.Timer(1.0, slow_store.answer.set)
    timer.start()
    with pytest.raises(ClaimTooLate):
        slow.claim(KEY, "slow")
    timer.join()
    assert not record(db).exists
    assert ledger_on(db).claim(KEY, "next").kind is ClaimKind.CREATED


@pytest.fixture
def counted(emulator_host, project, clock):
    """A ledger whose Firestore RPCs are counted on the wire, starting from zero."""
    client, rpcs = counted_emulator_client(emulator_host, project)
    ledger = ledger_on(client, clock=clock)
    rpcs.reset()
    return ledger, rpcs


def test_happy_path_costs_two_rpcs_on_the_wire(counted):
    ledger, rpcs = counted
    ledger.complete(ledger.claim(KEY, "attempt-1"))
    assert rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # create, complete

    rpcs.reset()
    with pytest.raises(RunAlreadyCompleted):
        ledger.claim(KEY, "attempt-2")
    assert rpcs.snapshot() == {"BatchWrite": 1, "BatchGetDocuments": 1}  # refused create + one read


def test_failed_run_costs_two_rpcs_on_the_wire(counted):
    ledger, rpcs = counted
    ledger.release(ledger.claim(KEY, "attempt-1"))
    assert rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # create, delete
