"""What a write of the run's attempts comes to, by the table: a delivery's claim finding a
record, and a refused write of the owner judged from the record read back."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Final

from exactly_once.ledger.fields import CHECKPOINT, CLAIMED_AT, EXPIRE_AT, TARGET
from exactly_once.ledger.lifecycle.states import (
    ATTEMPT_ID,
    BODY_SHA256,
    ERROR,
    OUTPUT_JSON,
    ClaimKind,
    JobResult,
    State,
    StoredRecord,
    lease_seconds_left,
    recorded_by_another_target,
    result_of,
    state_of,
)
from exactly_once.ledger.lifecycle.table import Event, Refusal, step

# ---- The claim ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TakeOver:
    """The claim may overwrite the record it read: as `kind`, inheriting `checkpoint_json`."""

    kind: ClaimKind
    checkpoint_json: str | None


@dataclass(frozen=True)
class Finished:
    """The run is completed: the delivery is answered from the record."""

    result: JobResult
    output_json: str | None
    fingerprint: str
    error: str | None
    seconds_left: float  # until the record's retention ends, Firestore's clock


@dataclass(frozen=True)
class Held:
    """Another attempt holds a live lease."""

    retry_after_seconds: int
    holder: str | None
    fingerprint: str


@dataclass(frozen=True)
class OtherTarget:
    """Another function recorded the run: two deployments share a collection and a job name."""

    recorded: str


ClaimVerdict = TakeOver | Finished | Held | OtherTarget


def on_claim(record: StoredRecord, *, target: str, default_lease: timedelta) -> ClaimVerdict:
    """What a delivery's claim does with the record it found (its create was refused): the
    table's claim from the record's state."""
    fields = record.fields
    if recorded_by_another_target(fields, target):
        return OtherTarget(str(fields[TARGET]))
    claim = step(state_of(record, default_lease), Event.CLAIM)
    if claim.claim is not None:
        return TakeOver(claim.claim, inherited_checkpoint(record))
    fingerprint = fields.get(BODY_SHA256) or ""
    if claim.refusal is Refusal.HELD:
        seconds_left = lease_seconds_left(record, default_lease)
        return Held(max(1, math.ceil(seconds_left)), fields.get(ATTEMPT_ID), fingerprint)
    error = fields.get(ERROR)
    return Finished(
        result_of(fields) or JobResult.SUCCEEDED,
        fields.get(OUTPUT_JSON),
        fingerprint,
        error if isinstance(error, str) else None,
        (fields[EXPIRE_AT] - record.read_time).total_seconds(),
    )


def inherited_checkpoint(record: StoredRecord) -> str | None:
    """What a claim taking this record over resumes from: the checkpoint of a run that never
    completed; nothing from a completed one (an expired record taken over starts afresh)."""
    if result_of(record.fields) is not None:
        return None
    checkpoint = record.fields.get(CHECKPOINT)
    return checkpoint if isinstance(checkpoint, str) else None


def own_claim_kind(record: StoredRecord, unheard: ClaimKind | None) -> ClaimKind:
    """Which write of ours holds the record, found after its answer was lost: a create leaves it
    with update_time equal to its create_time; an update (a takeover) does not. `unheard` is the
    kind of the latest write of ours that may have committed unanswered."""
    if record.create_time is not None and record.create_time == record.update_time:
        return ClaimKind.CREATED
    if unheard is not None and unheard is not ClaimKind.CREATED:
        return unheard
    return ClaimKind.CREATED if record.create_time is None else ClaimKind.TOOK_OVER_LEASE


# ---- A refused write of the owner ----------------------------------------------------------


class AfterRefusal(Enum):
    """What a refused conditional write of the run's owner came to, once the record is read."""

    COMMITTED = "committed"  # our own write, whose answer was lost: done
    RETRY = "retry"  # our record, changed by our own renewal: send again on its update_time
    LOST = "lost"  # another attempt owns the run: its lease ran out under us
    OTHERS_REFUSED = "others refused"  # the record was as expected: a write riding along was refused


# How much earlier than its commit a claim's `claimed_at` may read: the Firestore emulator
# stamps a server timestamp when it takes the request, in whole milliseconds, a few
# milliseconds before the commit (production stamps the commit time itself). A claim this
# close to our lease's end is not taken as proof that our release came first.
CLAIM_STAMP_MARGIN: Final = timedelta(seconds=1)


def after_refusal(
    event: Event,
    *,
    attempt_id: str,
    lease_ends: datetime,
    sent_on: datetime,
    unheard: bool,
    others_refused: bool,
    found: StoredRecord | None,
) -> AfterRefusal:
    """Judge a refused write of `event` (renew, complete, a skip, release, give back) sent
    on `sent_on` by `attempt_id`, whose lease ends no earlier than `lease_ends`, from the record
    `found` by reading it back. `unheard`: a try of this very write went unanswered, so it may
    have committed. `others_refused`: Firestore's refusal may be about a write riding along.

    Our write committed exactly when the record is where the table's step of `event` leads:
    gone for a release that deleted it, our own completed record for a completion, our own
    released record for a release. Our record still in progress was changed by a renewal of
    ours whose answer was lost: write again on it.

    A release that committed unheard and was followed at once by the next delivery's claim
    finds another attempt's record (a create after its delete, a takeover of its `released`
    rewrite). Nobody can take a live lease over, so a claim that committed before our lease
    could end came after our release: that is our release's success, not a lost lease (its
    `claimed_at` at least CLAIM_STAMP_MARGIN before our lease's end, to be sure)."""
    leads_to = step(State.LEASED, event).to
    if found is None:
        # Gone: deleted by our release (or by hand, or TTL: the run is free all the same).
        return AfterRefusal.COMMITTED if State.ABSENT in leads_to else AfterRefusal.LOST
    if found.fields.get(ATTEMPT_ID) != attempt_id:
        claimed_at = found.fields.get(CLAIMED_AT)
        claimed_in_our_lease = (
            isinstance(claimed_at, datetime) and claimed_at + CLAIM_STAMP_MARGIN < lease_ends
        )
        released = State.RELEASED in leads_to
        return AfterRefusal.COMMITTED if released and unheard and claimed_in_our_lease else AfterRefusal.LOST
    if others_refused and found.update_time == sent_on:
        return AfterRefusal.OTHERS_REFUSED
    # Judged as a state only by what its owner wrote: a lease that ran out is still ours to write.
    state = state_of(found, timedelta())
    if state in (State.LEASED, State.LAPSED):
        return AfterRefusal.RETRY
    settled = State.COMPLETED if state is State.EXPIRED else state
    return AfterRefusal.COMMITTED if settled in leads_to else AfterRefusal.LOST


def completion_event(result: JobResult) -> Event:
    """The lifecycle's event for a completing write of `result`: a skip is its own event, since
    its job never ran."""
    return {JobResult.SKIPPED_LATE: Event.SKIP_LATE, JobResult.SKIPPED_PAUSED: Event.SKIP_PAUSED}.get(
        result, Event.COMPLETE
    )
