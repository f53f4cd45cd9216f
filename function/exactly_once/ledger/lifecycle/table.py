"""The run lifecycle's transition table: for each (state, event), where the record goes, which
write takes it there, and what rides along. The claim, the owner's writes judged after a refusal,
`ops redo` and the docs all read this one mapping (`step`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from exactly_once.ledger.lifecycle.states import ClaimKind, State


class Event(StrEnum):
    CLAIM = "claim"  # a delivery's claim: a create, or a takeover of what it found
    RENEW = "renew"
    COMPLETE = "complete"
    SKIP_LATE = "skip late"
    SKIP_PAUSED = "skip paused"
    RELEASE = "release"
    GIVE_BACK = "give back"
    EXPIRE = "expire"
    REDO = "redo"  # `ops redo`: a completed run's record deleted, so its next delivery runs it


class Write(StrEnum):
    """The one write (or none) a transition is made with."""

    CREATE = "create (refused if any record exists)"
    AS_READ = "update conditioned on the record as read"
    AS_OWNER = "update conditioned on the owner's last write"
    RELEASE = "update (or delete) conditioned on the owner's last write"
    DELETE_AS_READ = "delete conditioned on the record as read"
    NONE = "none"


class Refusal(StrEnum):
    """How a claim is answered in a state it cannot own."""

    HELD = "in_progress (409, Retry-After = seconds left on the lease)"
    ANSWERED = "answered from the record: the job is not run again"


@dataclass(frozen=True)
class Step:
    """Where one event takes a record: to one of `to` (empty: nowhere, the event is refused),
    with `write`, carrying `carries`. A claim that owns the run names its kind; one that cannot
    names its refusal. `shown` is how the docs name the target."""

    to: frozenset[State]
    write: Write
    carries: str
    shown: str
    claim: ClaimKind | None = None
    refusal: Refusal | None = None


class NoTransition(Exception):
    """The table has no row for the event in that state: the write must not be made."""

    def __init__(self, state: State, event: Event) -> None:
        super().__init__(f"no transition for {event.value!r} from {state.value!r}")
        self.state = state
        self.event = event


_LEASED = frozenset({State.LEASED})
_COMPLETED = frozenset({State.COMPLETED})
_GIVEN_BACK = frozenset({State.RELEASED, State.ABSENT})
_GONE = frozenset({State.ABSENT})
_COMPLETION = "update conditioned on the owner's last write"


def _take_over(kind: ClaimKind, carries: str) -> Step:
    return Step(_LEASED, Write.AS_READ, carries, "leased", claim=kind)


def _refused(refusal: Refusal) -> Step:
    return Step(frozenset(), Write.NONE, refusal.value, "(unchanged)", refusal=refusal)


def _expires(to: State, shown: str, carries: str) -> Step:
    return Step(frozenset({to}), Write.NONE, carries, shown)


_HOLDS: Final = "the checkpoint the record holds"
_UNFINISHED_EXPIRES: Final = (
    "its checkpoint goes with it: the TTL deletes it after `expire_at` (the claimer's clock + "
    "retention), and a run unfinished for the whole retention starts afresh"
)
_GIVE_BACK_CARRIES: Final = "exactly the checkpoint the claim inherited; nothing else (the job never ran)"

TRANSITIONS: Final[Mapping[tuple[State, Event], Step]] = {
    (State.ABSENT, Event.CLAIM): Step(
        _LEASED, Write.CREATE, "attempt id, lease, fence = the commit time", "leased", claim=ClaimKind.CREATED
    ),
    (State.LAPSED, Event.CLAIM): _take_over(ClaimKind.TOOK_OVER_LEASE, _HOLDS),
    (State.RELEASED, Event.CLAIM): _take_over(ClaimKind.RECLAIMED_RELEASED, _HOLDS),
    (State.EXPIRED, Event.CLAIM): _take_over(
        ClaimKind.RECLAIMED_EXPIRED, "no checkpoint: a completed run resumes nothing"
    ),
    (State.LEASED, Event.CLAIM): _refused(Refusal.HELD),
    (State.COMPLETED, Event.CLAIM): _refused(Refusal.ANSWERED),
    (State.LEASED, Event.RENEW): Step(
        _LEASED, Write.AS_OWNER, "the owner's newer checkpoint, when it changed", "leased"
    ),
    (State.LEASED, Event.COMPLETE): Step(
        _COMPLETED,
        Write.AS_OWNER,
        "output or error, staged writes (success only), job status, downstream work; checkpoint cleared",
        "completed (succeeded, terminal failure or overlap skipped)",
    ),
    (State.LEASED, Event.SKIP_LATE): Step(
        _COMPLETED, Write.AS_OWNER, "why it was late; checkpoint cleared", "completed (skipped late)"
    ),
    (State.LEASED, Event.SKIP_PAUSED): Step(
        _COMPLETED,
        Write.AS_OWNER,
        "which failed runs paused the job, the job status as read (or the skip is refused whole); "
        "checkpoint cleared",
        "completed (skipped paused)",
    ),
    (State.LEASED, Event.RELEASE): Step(
        _GIVEN_BACK,
        Write.RELEASE,
        "the owner's latest checkpoint (its own or the one it inherited), job status failure",
        "released, or absent without a checkpoint",
    ),
    (State.LEASED, Event.GIVE_BACK): Step(
        _GIVEN_BACK, Write.RELEASE, _GIVE_BACK_CARRIES, "released, or absent without a checkpoint"
    ),
    (State.COMPLETED, Event.EXPIRE): _expires(
        State.EXPIRED,
        "expired, then absent",
        "nothing: past `expire_at` (retention from the later of the owner's last write and the "
        "ScheduleTime) a claim takes it over; Firestore's TTL deletes it up to days later",
    ),
    (State.LAPSED, Event.EXPIRE): _expires(State.ABSENT, "absent", _UNFINISHED_EXPIRES),
    (State.RELEASED, Event.EXPIRE): _expires(State.ABSENT, "absent", _UNFINISHED_EXPIRES),
    (State.COMPLETED, Event.REDO): Step(
        _GONE, Write.DELETE_AS_READ, "nothing: the next delivery claims the run afresh", "absent"
    ),
    (State.EXPIRED, Event.REDO): Step(
        _GONE, Write.DELETE_AS_READ, "nothing: the next delivery claims the run afresh", "absent"
    ),
}


def step(state: State, event: Event) -> Step:
    """The transition `event` makes from `state`; NoTransition when the table has none."""
    found = TRANSITIONS.get((state, event))
    if found is None:
        raise NoTransition(state, event)
    return found


def claimable(state: State) -> bool:
    """Whether a delivery's claim would own the run now."""
    return step(state, Event.CLAIM).claim is not None
