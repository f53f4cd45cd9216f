"""The lifecycle of a run: the states of its record, the events that move it, what rides along.

Every path that writes a run record or judges one asks this module: the ledger's claim, renewal
and finish, the handler's give-backs, the forced-run path, the job locks, the missed-run audit
and its catch-up, the ops CLI. None of them compares a record's `status` itself, so a new
capability cannot add a path that decides a run's state on its own (a test holds every module
of the function package to that).

Pure: no Firestore, no clock. Every time it is given is Firestore's: a commit time
(`update_time`) or the time a read was served (`read_time`). A record is judged as of its read.

The states of a run's record, as one read sees it (`State`):

- `absent`: no record. Never claimed, or given back without a checkpoint (the record deleted).
- `expired`: completed, and past its retention (`expire_at`): Firestore's TTL deletes it some
  time later, and until it does the record counts as absent.
- `leased`: in progress, its lease live: an attempt is running the job.
- `lapsed`: in progress, its lease over: its attempt crashed, froze or was cut off.
- `released`: given back with a checkpoint to keep: claimable at once, like an absent record.
- `completed`: final, with its result (`JobResult`).

The transitions (`TRANSITIONS` below; `make docs` writes this table from it, here and into
docs/deduplication.md):

<!-- BEGIN GENERATED: lifecycle -->
| From | Event | To | Write | Rides along |
| --- | --- | --- | --- | --- |
| `absent` | claim | leased | create (refused if any record exists) | attempt id, lease, fence = the commit time |
| `lapsed`, `released`, `expired` | take over | leased | update conditioned on the record as read | the checkpoint the record holds (none from an expired, completed record) |
| `leased` | renew | leased | update conditioned on the owner's last write | the owner's newer checkpoint, when it changed |
| `leased` | complete | completed (succeeded, terminal failure or overlap skipped) | update conditioned on the owner's last write | output or error, staged writes (success only), job status, downstream work; checkpoint cleared |
| `leased` | skip late | completed (skipped late) | update conditioned on the owner's last write | why it was late; checkpoint cleared |
| `leased` | skip paused | completed (skipped paused) | update conditioned on the owner's last write | which failed runs paused the job; checkpoint cleared |
| `leased` | release | released, or absent without a checkpoint | update (or delete) conditioned on the owner's last write | the owner's latest checkpoint (its own or the one it inherited), job status failure |
| `leased` | give back | released, or absent without a checkpoint | update (or delete) conditioned on the owner's last write | exactly the checkpoint the claim inherited; nothing else (the job never ran) |
| `completed` | expire | expired, then absent | none: past `expire_at` (the claim's commit + retention) it counts as absent at once | nothing: Firestore's TTL deletes it, up to days later |
| `lapsed`, `released` | expire | absent | none: the TTL deletes it after `expire_at` (the claimer's clock + retention) | its checkpoint goes with it: a run unfinished for the whole retention starts afresh |
| `leased` | claim | (unchanged) | none | in_progress (409, Retry-After = seconds left on the lease) |
| `completed` | claim | (unchanged) | none | answered from the record: the job is not run again |
<!-- END GENERATED -->

Three rules hold across the table:

1. **A checkpoint lives as long as the run is unfinished.** A takeover inherits what the record
   holds; a renewal or a release replaces it only with the owner's own newer value; a give-back
   puts back exactly what the claim inherited; only completion clears it.
2. **Only the owner of the run's latest claim finishes it**: every write after the claim is
   conditioned on the owner's last write, and a refused one is read back and judged here
   (`after_refusal`): our own write whose answer was lost is a success, never `lease_lost`.
3. **The audit judges what the ledger would decide**: a run is caught up exactly when a
   delivery of it would be claimed (absent, expired, released or lapsed) and no delivery of it
   can still come.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum, StrEnum
from typing import Any, Final

from exactly_once.ledger.fields import (
    CHECKPOINT,
    CLAIMED_AT,
    COMPLETED_AT,
    EXPIRE_AT,
    RENEWED_AT,
    RESULT,
    SCHEDULE_TIME,
    TARGET,
    TRIGGER,
)

# The record's own fields besides those named in fields.py (which others outside the ledger
# read): only this module writes or compares them.
STATUS: Final = "status"
ATTEMPT_ID: Final = "attempt_id"
LEASE_SECONDS: Final = "lease_seconds"
ERROR: Final = "error"
OUTPUT_JSON: Final = "output_json"
BODY_SHA256: Final = "body_sha256"

# Every field the audit's verdict on a run reads (`judge`, `deliverable_again`, `has_record`,
# `progress`), and the two its line quotes (who held the run, why it failed): the audit reads
# records projected to these (and the downstream work's), so a field the verdict starts to read
# must be added here or the audit judges without it.
JUDGED_FIELDS: Final = (STATUS, EXPIRE_AT, LEASE_SECONDS, RESULT, TARGET, ATTEMPT_ID, ERROR)


class Status(StrEnum):
    """The stored `status` field."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    RELEASED = "released"


class JobResult(StrEnum):
    """How a completed run ended: the stored `result` field."""

    SUCCEEDED = "succeeded"
    TERMINAL_FAILURE = "terminal_failure"
    OVERLAP_SKIPPED = "overlap_skipped"  # another run of the job held its lock (policy skip)
    SKIPPED_LATE = "skipped_late"  # delivered past the job's startingDeadlineSeconds: never run
    # The job was paused after pauseAfterFailures failed runs in a row: never run.
    SKIPPED_PAUSED = "skipped_paused"


class ClaimKind(StrEnum):
    """Which write made a claim, by the state it found."""

    CREATED = "created"
    TOOK_OVER_LEASE = "took_over_lease"  # the previous attempt's lease had lapsed
    RECLAIMED_EXPIRED = "reclaimed_expired"  # past expire_at: TTL deletion had not run yet
    RECLAIMED_RELEASED = "reclaimed_released"  # given back with a checkpoint


class State(StrEnum):
    ABSENT = "absent"
    EXPIRED = "expired"
    LEASED = "leased"
    LAPSED = "lapsed"
    RELEASED = "released"
    COMPLETED = "completed"

    @property
    def claimable(self) -> bool:
        """Whether a delivery's claim would own the run now."""
        return self in _CLAIMABLE


_CLAIMABLE = frozenset({State.ABSENT, State.EXPIRED, State.LAPSED, State.RELEASED})


class Event(StrEnum):
    CLAIM = "claim"
    TAKE_OVER = "take over"
    RENEW = "renew"
    COMPLETE = "complete"
    SKIP_LATE = "skip late"
    SKIP_PAUSED = "skip paused"
    RELEASE = "release"
    GIVE_BACK = "give back"
    EXPIRE = "expire"


@dataclass(frozen=True)
class Transition:
    """One row of the lifecycle: from any of `sources`, `event` leads to `target`, written as
    `write` (one conditional write, or none), carrying `carries` in that write's commit."""

    sources: tuple[State, ...]
    event: Event
    target: str
    write: str
    carries: str


TRANSITIONS: Final[tuple[Transition, ...]] = (
    Transition(
        (State.ABSENT,),
        Event.CLAIM,
        "leased",
        "create (refused if any record exists)",
        "attempt id, lease, fence = the commit time",
    ),
    Transition(
        (State.LAPSED, State.RELEASED, State.EXPIRED),
        Event.TAKE_OVER,
        "leased",
        "update conditioned on the record as read",
        "the checkpoint the record holds (none from an expired, completed record)",
    ),
    Transition(
        (State.LEASED,),
        Event.RENEW,
        "leased",
        "update conditioned on the owner's last write",
        "the owner's newer checkpoint, when it changed",
    ),
    Transition(
        (State.LEASED,),
        Event.COMPLETE,
        "completed (succeeded, terminal failure or overlap skipped)",
        "update conditioned on the owner's last write",
        "output or error, staged writes (success only), job status, downstream work; checkpoint cleared",
    ),
    Transition(
        (State.LEASED,),
        Event.SKIP_LATE,
        "completed (skipped late)",
        "update conditioned on the owner's last write",
        "why it was late; checkpoint cleared",
    ),
    Transition(
        (State.LEASED,),
        Event.SKIP_PAUSED,
        "completed (skipped paused)",
        "update conditioned on the owner's last write",
        "which failed runs paused the job; checkpoint cleared",
    ),
    Transition(
        (State.LEASED,),
        Event.RELEASE,
        "released, or absent without a checkpoint",
        "update (or delete) conditioned on the owner's last write",
        "the owner's latest checkpoint (its own or the one it inherited), job status failure",
    ),
    Transition(
        (State.LEASED,),
        Event.GIVE_BACK,
        "released, or absent without a checkpoint",
        "update (or delete) conditioned on the owner's last write",
        "exactly the checkpoint the claim inherited; nothing else (the job never ran)",
    ),
    Transition(
        (State.COMPLETED,),
        Event.EXPIRE,
        "expired, then absent",
        "none: past `expire_at` (the claim's commit + retention) it counts as absent at once",
        "nothing: Firestore's TTL deletes it, up to days later",
    ),
    Transition(
        (State.LAPSED, State.RELEASED),
        Event.EXPIRE,
        "absent",
        "none: the TTL deletes it after `expire_at` (the claimer's clock + retention)",
        "its checkpoint goes with it: a run unfinished for the whole retention starts afresh",
    ),
)

# What happens to a delivery's claim in the states that refuse it.
REFUSALS: Final[Mapping[State, str]] = {
    State.LEASED: "in_progress (409, Retry-After = seconds left on the lease)",
    State.COMPLETED: "answered from the record: the job is not run again",
}


@dataclass(frozen=True)
class StoredRecord:
    """A run record as one read saw it. Also what the store returns for any document."""

    fields: Mapping[str, Any]
    update_time: datetime  # commit time of the record's last write (Firestore's clock)
    read_time: datetime  # when Firestore served this read (Firestore's clock)
    # Commit time of the write that created the document: equal to update_time when nothing
    # changed it since. None from a store that does not say.
    create_time: datetime | None = None


def state_of(record: StoredRecord | None, default_lease: timedelta) -> State:
    """The record's state as of its read. The lease is the one its owner wrote (the reader's
    configuration may differ mid-deploy); `default_lease` serves a record that names none."""
    if record is None:
        return State.ABSENT
    fields = record.fields
    status = fields.get(STATUS)
    if status == Status.COMPLETED:
        expire_at = fields.get(EXPIRE_AT)
        if isinstance(expire_at, datetime) and expire_at <= record.read_time:
            return State.EXPIRED
        return State.COMPLETED
    if status == Status.RELEASED:
        return State.RELEASED
    return State.LEASED if lease_seconds_left(record, default_lease) > 0 else State.LAPSED


def lease_seconds_left(record: StoredRecord, default_lease: timedelta) -> float:
    """Seconds left on an in-progress record's lease, on Firestore's clock: the lease runs
    from the owner's last write (claim or renewal). Zero or less: lapsed."""
    written = record.fields.get(LEASE_SECONDS)
    lease = float(written) if isinstance(written, int | float) else default_lease.total_seconds()
    return (record.update_time + timedelta(seconds=lease) - record.read_time).total_seconds()


def is_owned_by(record: StoredRecord | None, attempt_id: str) -> bool:
    """Whether `attempt_id` wrote the record's latest claim (its owner, or its last owner)."""
    return record is not None and record.fields.get(ATTEMPT_ID) == attempt_id


def holds_claim(record: StoredRecord | None, attempt_id: str) -> bool:
    """Whether the record is `attempt_id`'s claim, still in progress (its lease live or not)."""
    return (
        is_owned_by(record, attempt_id)
        and record is not None
        and record.fields.get(STATUS) == Status.IN_PROGRESS
    )


def result_of(fields: Mapping[str, Any]) -> JobResult | None:
    """A completed record's result (succeeded when a record names none); None otherwise."""
    if fields.get(STATUS) != Status.COMPLETED:
        return None
    recorded = fields.get(RESULT)
    return JobResult(recorded) if recorded in set(JobResult) else JobResult.SUCCEEDED


def recorded_by_another_target(fields: Mapping[str, Any], target: str | None) -> bool:
    """Whether the function of `target` must refuse the run these fields hold: the one rule of
    the ledger's claim and of the missed-run audit. A record or a function without a target (one
    outside Cloud Run) is nobody else's."""
    recorded = fields.get(TARGET)
    return bool(target and recorded and recorded != target)


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
    """What a delivery's claim does with the record it found (its create was refused)."""
    fields = record.fields
    if recorded_by_another_target(fields, target):
        return OtherTarget(str(fields[TARGET]))
    state = state_of(record, default_lease)
    if state is State.COMPLETED:
        result = result_of(fields) or JobResult.SUCCEEDED
        error = fields.get(ERROR)
        return Finished(
            result,
            fields.get(OUTPUT_JSON),
            fields.get(BODY_SHA256) or "",
            error if isinstance(error, str) else None,
            (fields[EXPIRE_AT] - record.read_time).total_seconds(),
        )
    if state is State.LEASED:
        seconds_left = lease_seconds_left(record, default_lease)
        return Held(max(1, math.ceil(seconds_left)), fields.get(ATTEMPT_ID), fields.get(BODY_SHA256) or "")
    kind = {
        State.EXPIRED: ClaimKind.RECLAIMED_EXPIRED,
        State.RELEASED: ClaimKind.RECLAIMED_RELEASED,
        State.LAPSED: ClaimKind.TOOK_OVER_LEASE,
    }[state]
    return TakeOver(kind, inherited_checkpoint(record))


def inherited_checkpoint(record: StoredRecord) -> str | None:
    """What a claim taking this record over resumes from: the checkpoint of a run that never
    completed; nothing from a completed one (an expired record taken over starts afresh)."""
    if record.fields.get(STATUS) == Status.COMPLETED:
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


# ---- What each write writes ---------------------------------------------------------------


def claimed_fields(
    *,
    attempt_id: str,
    lease: timedelta,
    expire_at: datetime,
    about: Mapping[str, Any],
    target: str,
    fingerprint: str,
    checkpoint_json: str | None,
    commit_time: Any,
) -> dict[str, Any]:
    """The record a claim writes (a create, or a takeover's whole update). Every field is
    always present (None until it applies), so a takeover replaces a completed record's
    leftovers too. `about` says which run it is (job, schedule time, trigger, project,
    location); `expire_at` only dates the TTL field (the lease runs from the commit);
    `commit_time` is the store's server timestamp."""
    return {
        STATUS: Status.IN_PROGRESS.value,
        ATTEMPT_ID: attempt_id,
        LEASE_SECONDS: lease.total_seconds(),
        EXPIRE_AT: expire_at,
        **about,
        TARGET: target or None,
        BODY_SHA256: fingerprint or None,
        CLAIMED_AT: commit_time,
        RENEWED_AT: None,
        COMPLETED_AT: None,
        RESULT: None,
        ERROR: None,
        OUTPUT_JSON: None,
        CHECKPOINT: checkpoint_json,
    }


def about_run(
    *, job_name: str, schedule_time: datetime, trigger: str, project: str, location: str
) -> dict[str, Any]:
    """Which run a record is, for operators and for the audit's queries."""
    return {
        "job_name": job_name,
        SCHEDULE_TIME: schedule_time,
        TRIGGER: trigger,
        "project": project,
        "location": location,
    }


def renewal_fields(checkpoint_json: str | None, commit_time: Any) -> dict[str, Any]:
    """A renewal: the lease starts again at its commit; a changed checkpoint rides along."""
    fields: dict[str, Any] = {RENEWED_AT: commit_time}
    if checkpoint_json is not None:
        fields[CHECKPOINT] = checkpoint_json
    return fields


def completion_fields(
    result: JobResult,
    *,
    error: str | None,
    output_json: str | None,
    expire_at: datetime,
    commit_time: Any,
    reported: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The completing write. `expire_at` is the claim's commit time plus retention, so retention
    is on Firestore's clock too; `reported` is what the job reported about its run (the
    downstream work a proxy started)."""
    return {
        **(reported or {}),
        STATUS: Status.COMPLETED.value,
        COMPLETED_AT: commit_time,
        EXPIRE_AT: expire_at,
        RESULT: result.value,
        ERROR: error,
        OUTPUT_JSON: output_json,
        CHECKPOINT: None,  # a completed run resumes nothing
    }


def retained_until(last_write: datetime, schedule_time: datetime | None, retention: timedelta) -> datetime:
    """When a completed record's retention ends: `retention` past the owner's last write, or
    past the run's ScheduleTime when that is later. A run claimed a few seconds early (a
    dispatch within the forced-run tolerance) would otherwise expire before it leaves a catch-up
    window as long as the retention, and catch-up would find it gone and deliver it again."""
    start = max(last_write, schedule_time) if schedule_time is not None else last_write
    return start + retention


def release_fields(checkpoint_json: str | None) -> dict[str, Any] | None:
    """A release or give-back: the record rewritten `released` with the checkpoint to keep, or
    None when there is none to keep and the record is deleted (one write either way). Either
    way the next claim owns the run at once."""
    if checkpoint_json is None:
        return None
    return {STATUS: Status.RELEASED.value, CHECKPOINT: checkpoint_json}


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

    A release that committed unheard and was followed at once by the next delivery's claim
    finds another attempt's record (a create after its delete, a takeover of its `released`
    rewrite). Nobody can take a live lease over, so a claim that committed before our lease
    could end came after our release: that is our release's success, not a lost lease (its
    `claimed_at` at least CLAIM_STAMP_MARGIN before our lease's end, to be sure)."""
    if found is None:
        # Gone: deleted by our release (or by hand, or TTL: the run is free all the same).
        return AfterRefusal.COMMITTED if event in _RELEASES else AfterRefusal.LOST
    fields = found.fields
    if fields.get(ATTEMPT_ID) != attempt_id:
        claimed_at = fields.get(CLAIMED_AT)
        claimed_in_our_lease = (
            isinstance(claimed_at, datetime) and claimed_at + CLAIM_STAMP_MARGIN < lease_ends
        )
        return (
            AfterRefusal.COMMITTED
            if event in _RELEASES and unheard and claimed_in_our_lease
            else AfterRefusal.LOST
        )
    if others_refused and found.update_time == sent_on:
        return AfterRefusal.OTHERS_REFUSED
    status = fields.get(STATUS)
    if status == Status.COMPLETED:
        return AfterRefusal.COMMITTED if event in _COMPLETIONS else AfterRefusal.LOST
    if status == Status.RELEASED:
        return AfterRefusal.COMMITTED if event in _RELEASES else AfterRefusal.LOST
    return AfterRefusal.RETRY


_RELEASES = frozenset({Event.RELEASE, Event.GIVE_BACK})
_COMPLETIONS = frozenset({Event.COMPLETE, Event.SKIP_LATE, Event.SKIP_PAUSED})


def completion_event(result: JobResult) -> Event:
    """The lifecycle's event for a completing write of `result`: a skip is its own event, since
    its job never ran."""
    return _SKIP_EVENTS.get(result, Event.COMPLETE)


_SKIP_EVENTS: Final[Mapping[JobResult, Event]] = {
    JobResult.SKIPPED_LATE: Event.SKIP_LATE,
    JobResult.SKIPPED_PAUSED: Event.SKIP_PAUSED,
}


# ---- The audit's verdicts ----------------------------------------------------------------


class Verdict(StrEnum):
    """What the missed-run audit says of one expected run."""

    COMPLETED = "completed"
    TERMINAL_FAILURE = "terminal failure"
    SKIPPED_LATE = "skipped late"
    IN_PROGRESS = "in progress"  # a record exists and a delivery may still come
    PENDING = "pending"  # no record yet, and a delivery may still come
    MISSED = "missed"
    PAUSED = "paused"  # no record, and the job was paused at the run's time: skipped on purpose
    # Completed, but the work it started downstream failed or was cancelled. The lifecycle
    # never reads what a run started; the audit refines `completed` to this.
    DOWNSTREAM_FAILED = "downstream failed"


def judge(
    record: StoredRecord | None,
    *,
    window_closed: bool,
    paused: bool,
    target: str | None,
    default_lease: timedelta,
) -> Verdict:
    """One expected run's verdict, from its record (or its absence) read at the audit's time.
    `window_closed`: no delivery of it can still come. `paused`: the job was paused at the
    run's time. `target`: the one this stack's function records (None: any counts as ours)."""
    state = state_of(record, default_lease)
    if record is not None and recorded_by_another_target(record.fields, target):
        return Verdict.MISSED  # refused on every delivery: this stack never runs it
    if state in (State.COMPLETED, State.EXPIRED):
        # A completed record past its retention still says how its run ended: a delivery would
        # take it over, but the run happened, so it is judged by its result, never missed (and
        # never delivered again by catch-up).
        return _BY_RESULT[result_of(record.fields if record else {}) or JobResult.SUCCEEDED]
    unrecorded = state is State.ABSENT
    if unrecorded and paused:
        return Verdict.PAUSED
    if not window_closed:
        return Verdict.PENDING if unrecorded else Verdict.IN_PROGRESS
    return Verdict.MISSED


_BY_RESULT: Final[Mapping[JobResult, Verdict]] = {
    JobResult.SUCCEEDED: Verdict.COMPLETED,
    JobResult.OVERLAP_SKIPPED: Verdict.COMPLETED,
    JobResult.TERMINAL_FAILURE: Verdict.TERMINAL_FAILURE,
    JobResult.SKIPPED_LATE: Verdict.SKIPPED_LATE,
    # Skipped on purpose while the job was paused after failures: the ledger decided the run,
    # so it is never missed (and never delivered again by catch-up).
    JobResult.SKIPPED_PAUSED: Verdict.COMPLETED,
}


def deliverable_again(
    record: StoredRecord | None, verdict: Verdict, *, target: str | None, default_lease: timedelta
) -> bool:
    """Whether catch-up may deliver a missed run again: a delivery would own it now (absent,
    expired, released with a checkpoint, or lapsed), and it is this stack's. A run an attempt
    holds (a catch-up delivery still running) or another function recorded is not."""
    if verdict is not Verdict.MISSED:
        return False
    if record is not None and recorded_by_another_target(record.fields, target):
        return False
    return state_of(record, default_lease).claimable


def has_record(record: StoredRecord | None, default_lease: timedelta) -> bool:
    """Whether any attempt left a record of the run (a completed one past its retention
    included: its run happened)."""
    return state_of(record, default_lease) is not State.ABSENT


def progress(record: StoredRecord | None, default_lease: timedelta) -> int:
    """How far along a run its record is, to pick between two records of one run (a wall time a
    fall-back repeats has two instants): completed, then held, given back, lapsed, none."""
    return _PROGRESS[state_of(record, default_lease)]


_PROGRESS: Final[Mapping[State, int]] = {
    State.ABSENT: 0,
    State.EXPIRED: 0,
    State.LAPSED: 1,
    State.RELEASED: 2,
    State.LEASED: 3,
    State.COMPLETED: 4,
}
