"""The lifecycle's decisions, one by one, on records whose times the test chooses: pure, no
store, no clock. Every other module asks these functions; here is what they answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once.ledger import lifecycle
from exactly_once.ledger.lifecycle import (
    AfterRefusal,
    ClaimKind,
    Event,
    Finished,
    Held,
    JobResult,
    OtherTarget,
    State,
    StoredRecord,
    TakeOver,
    Verdict,
)

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def record(read_after: float = 0.0, **fields: Any) -> StoredRecord:
    """A record last written at T0 and read `read_after` seconds later."""
    return StoredRecord(fields, update_time=T0, read_time=T0 + timedelta(seconds=read_after), create_time=T0)


IN_PROGRESS = {"status": "in_progress", "attempt_id": "a", "lease_seconds": 30.0}
COMPLETED = {
    "status": "completed",
    "attempt_id": "a",
    "result": "succeeded",
    "expire_at": T0 + timedelta(days=1),
}
RELEASED = {"status": "released", "attempt_id": "a", "checkpoint_json": '{"page":3}'}


@pytest.mark.parametrize(
    ("stored", "state"),
    [
        (None, State.ABSENT),
        (record(29, **IN_PROGRESS), State.LEASED),
        (record(30, **IN_PROGRESS), State.LAPSED),
        (record(5, **RELEASED), State.RELEASED),
        (record(5, **COMPLETED), State.COMPLETED),
        (record(86_400, **COMPLETED), State.EXPIRED),
        # The lease the owner wrote, not the reader's: a 10 s lease is over after 10 s.
        (record(11, **{**IN_PROGRESS, "lease_seconds": 10.0}), State.LAPSED),
    ],
)
def test_state_of_a_record_as_read(stored: StoredRecord | None, state: State) -> None:
    assert lifecycle.state_of(stored, LEASE) is state


def test_only_absent_expired_lapsed_and_released_runs_are_claimable() -> None:
    assert {state for state in State if lifecycle.claimable(state)} == {
        State.ABSENT,
        State.EXPIRED,
        State.LAPSED,
        State.RELEASED,
    }


@pytest.mark.parametrize(
    ("stored", "verdict"),
    [
        (
            record(31, **{**IN_PROGRESS, "checkpoint_json": '{"step":2}'}),
            TakeOver(ClaimKind.TOOK_OVER_LEASE, '{"step":2}'),
        ),
        (record(1, **RELEASED), TakeOver(ClaimKind.RECLAIMED_RELEASED, '{"page":3}')),
        (
            record(86_401, **{**COMPLETED, "checkpoint_json": None}),
            TakeOver(ClaimKind.RECLAIMED_EXPIRED, None),
        ),
        (record(10.2, **IN_PROGRESS), Held(20, "a", "")),
        (
            record(3600, **{**COMPLETED, "output_json": "1", "body_sha256": "ab"}),
            Finished(lifecycle.JobResult.SUCCEEDED, "1", "ab", None, 82_800.0),
        ),
        (record(1, **{**IN_PROGRESS, "target": "crm"}), OtherTarget("crm")),
    ],
)
def test_what_a_refused_create_does_with_the_record_it_found(stored: StoredRecord, verdict: object) -> None:
    assert lifecycle.on_claim(stored, target="eos", default_lease=LEASE) == verdict


@pytest.mark.parametrize("checkpoint", [None, '{"page":3}'])
def test_a_release_keeps_a_checkpoint_in_a_released_record_and_deletes_one_without(
    checkpoint: str | None,
) -> None:
    fields = lifecycle.release_fields(checkpoint)
    if checkpoint is None:
        assert fields is None  # deleted: the next claim creates the record afresh
    else:
        assert fields == {"status": "released", "checkpoint_json": checkpoint}


def test_a_completion_clears_the_checkpoint_and_dates_retention_from_the_claim() -> None:
    fields = lifecycle.completion_fields(
        lifecycle.JobResult.TERMINAL_FAILURE, error="no", output_json=None, expire_at=T0, commit_time="now"
    )
    assert (fields["status"], fields["result"], fields["checkpoint_json"], fields["expire_at"]) == (
        "completed",
        "terminal_failure",
        None,
        T0,
    )


LEASE_ENDS = T0 + LEASE


def refusal(
    event: Event, found: StoredRecord | None, *, unheard: bool = True, others: bool = False
) -> AfterRefusal:
    return lifecycle.after_refusal(
        event,
        attempt_id="ours",
        lease_ends=LEASE_ENDS,
        sent_on=T0,
        unheard=unheard,
        others_refused=others,
        found=found,
    )


def others(claimed_at: datetime) -> StoredRecord:
    return record(1, **{**IN_PROGRESS, "attempt_id": "next", "claimed_at": claimed_at})


@pytest.mark.parametrize("event", [Event.RELEASE, Event.GIVE_BACK])
def test_a_release_answered_late_while_the_next_claim_committed_is_a_release(event: Event) -> None:
    """Nobody takes a live lease over: another attempt's claim inside our lease came after our
    release committed. After the lease (less the stamp's margin) it may be a takeover."""
    assert refusal(event, others(T0 + timedelta(seconds=5))) is AfterRefusal.COMMITTED
    assert refusal(event, others(LEASE_ENDS - timedelta(milliseconds=500))) is AfterRefusal.LOST
    assert refusal(event, others(LEASE_ENDS + timedelta(seconds=1))) is AfterRefusal.LOST
    # A refusal with no try unanswered: our release never committed, a rival changed the record.
    assert refusal(event, others(T0 + timedelta(seconds=5)), unheard=False) is AfterRefusal.LOST
    assert refusal(event, None) is AfterRefusal.COMMITTED  # gone: our delete


@pytest.mark.parametrize("event", [Event.RENEW, Event.COMPLETE, Event.SKIP_LATE, Event.SKIP_PAUSED])
def test_another_attempts_record_is_a_lost_lease_for_every_other_write(event: Event) -> None:
    assert refusal(event, others(T0 + timedelta(seconds=5))) is AfterRefusal.LOST
    assert refusal(event, None) is AfterRefusal.LOST


def test_our_own_record_tells_a_late_answer_from_a_renewal_to_write_over() -> None:
    ours = {**IN_PROGRESS, "attempt_id": "ours"}
    done = StoredRecord({**ours, "status": "completed"}, T0 + timedelta(seconds=2), T0 + timedelta(seconds=3))
    given_back = StoredRecord(
        {**ours, "status": "released"}, T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)
    )
    renewed = StoredRecord(ours, T0 + timedelta(seconds=2), T0 + timedelta(seconds=3))
    assert refusal(Event.COMPLETE, done) is AfterRefusal.COMMITTED
    assert refusal(Event.SKIP_PAUSED, done) is AfterRefusal.COMMITTED
    assert refusal(Event.RELEASE, done) is AfterRefusal.LOST
    assert refusal(Event.GIVE_BACK, given_back) is AfterRefusal.COMMITTED
    assert refusal(Event.RENEW, given_back) is AfterRefusal.LOST
    assert refusal(Event.COMPLETE, renewed) is AfterRefusal.RETRY
    unchanged = StoredRecord(ours, T0, T0 + timedelta(seconds=3))
    assert refusal(Event.COMPLETE, unchanged, others=True) is AfterRefusal.OTHERS_REFUSED


@pytest.mark.parametrize(
    ("stored", "closed", "paused", "verdict", "deliverable"),
    [
        (None, False, False, Verdict.PENDING, False),
        (None, True, False, Verdict.MISSED, True),
        (None, True, True, Verdict.PAUSED, False),
        (record(1, **RELEASED), True, True, Verdict.MISSED, True),  # delivered, so not paused
        (record(1, **RELEASED), False, False, Verdict.IN_PROGRESS, False),
        (record(31, **IN_PROGRESS), True, False, Verdict.MISSED, True),
        (record(1, **IN_PROGRESS), True, False, Verdict.MISSED, False),  # an attempt holds it now
        (record(1, **COMPLETED), True, False, Verdict.COMPLETED, False),
        (record(1, **{**COMPLETED, "result": "skipped_late"}), True, False, Verdict.SKIPPED_LATE, False),
        (
            record(1, **{**COMPLETED, "result": "terminal_failure"}),
            True,
            False,
            Verdict.TERMINAL_FAILURE,
            False,
        ),
        (record(1, **{**COMPLETED, "result": "overlap_skipped"}), True, False, Verdict.COMPLETED, False),
        # Skipped while its job was paused after failures: decided on purpose, never missed.
        (record(1, **{**COMPLETED, "result": "skipped_paused"}), True, False, Verdict.COMPLETED, False),
        # Past its retention a delivery would take it over, but the record still says it ran:
        # never missed, never delivered again by catch-up.
        (record(86_401, **COMPLETED), True, False, Verdict.COMPLETED, False),
        (record(1, **{**COMPLETED, "target": "crm"}), True, False, Verdict.MISSED, False),
    ],
)
def test_the_audits_verdict_and_whether_catch_up_delivers(
    stored: StoredRecord | None, closed: bool, paused: bool, verdict: Verdict, deliverable: bool
) -> None:
    judged = lifecycle.judge(stored, window_closed=closed, paused=paused, target="eos", default_lease=LEASE)
    assert judged is verdict
    assert lifecycle.deliverable_again(stored, judged, target="eos", default_lease=LEASE) is deliverable


def test_the_transitions_name_every_event_and_every_state() -> None:
    assert {event for _, event in lifecycle.TRANSITIONS} == set(Event)
    # Every state answers a claim, owned or refused; every step leads to states of the table.
    assert {state for state, event in lifecycle.TRANSITIONS if event is Event.CLAIM} == set(State)
    for found in lifecycle.TRANSITIONS.values():
        assert (found.claim is None) or (found.refusal is None)
        assert found.to <= set(State)


def test_an_event_the_table_has_no_row_for_is_refused() -> None:
    for state in (State.ABSENT, State.COMPLETED, State.RELEASED):
        with pytest.raises(lifecycle.NoTransition):
            lifecycle.step(state, Event.COMPLETE)
    with pytest.raises(lifecycle.NoTransition, match="'redo' from 'leased'"):
        lifecycle.step(State.LEASED, Event.REDO)


def test_each_skip_is_its_own_event_and_any_other_result_a_completion() -> None:
    assert lifecycle.completion_event(JobResult.SKIPPED_LATE) is Event.SKIP_LATE
    assert lifecycle.completion_event(JobResult.SKIPPED_PAUSED) is Event.SKIP_PAUSED
    for result in (JobResult.SUCCEEDED, JobResult.TERMINAL_FAILURE, JobResult.OVERLAP_SKIPPED):
        assert lifecycle.completion_event(result) is Event.COMPLETE
