"""The lock a job with an overlap policy (`skip`, `wait`) holds while one of its runs executes:
its states, the events that move them, and the one function that reads a lock's state.

The lock is a document of its own (delivery/overlap.py writes it); who may take it is decided
here, from the lock as read and the lifecycle's judgement of its holder's run, so a lock is live
exactly as long as the run holding it: no renewal of its own, no state that can outlive it.

The states of a lock, as one read sees it (`LockState`):

- `free`: no lock document.
- `held`: its holder's run is leased (or completed with downstream work still running): the
  contender's run is skipped or waits, as the job's overlap policy says.
- `left`: its holder's run completed, was given back, or its lease ended unrenewed: the next
  run takes it over.
- `ours`: held by an earlier attempt of the very run asking: that attempt's lease is over (this
  delivery owns the run now), so it is taken over like a left one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class LockState(StrEnum):
    FREE = "free"
    HELD = "held"
    LEFT = "left"
    OURS = "ours"


class LockEvent(StrEnum):
    TAKE = "take"
    RELEASE = "release"


@dataclass(frozen=True)
class LockStep:
    """One row: `target` None when the event is refused (the lock stays as it is)."""

    target: LockState | None
    write: str
    carries: str


_TAKEN = "the run and attempt holding it, when (the commit time), expire_at for the TTL"

LOCK_TRANSITIONS: Final[Mapping[tuple[LockState, LockEvent], LockStep]] = {
    (LockState.FREE, LockEvent.TAKE): LockStep(LockState.HELD, "create (refused if a lock exists)", _TAKEN),
    (LockState.LEFT, LockEvent.TAKE): LockStep(
        LockState.HELD, "update conditioned on the lock as read", _TAKEN
    ),
    (LockState.OURS, LockEvent.TAKE): LockStep(
        LockState.HELD, "update conditioned on the lock as read", _TAKEN
    ),
    (LockState.HELD, LockEvent.TAKE): LockStep(
        None,
        "none",
        "busy: `skip` records the run overlap skipped, `wait` answers 409 with Retry-After = the "
        "seconds left on the holder's lease",
    ),
    (LockState.HELD, LockEvent.RELEASE): LockStep(
        LockState.FREE,
        "delete conditioned on the holder's own take (a lock taken over since is not released)",
        "nothing: the next run of the job takes it at once",
    ),
}


def lock_state(found: bool, holder_run_id: str | None, run_id: str, holder_seconds_left: float) -> LockState:
    """The lock's state for a delivery of `run_id`, as one read found it (`found`: a lock
    document exists; `holder_run_id` None when it names no run, which nothing keeps); and
    `holder_seconds_left`, how long the holder's run keeps the lock (its lease's seconds left
    as lifecycle.seconds_held judges them, zero once the run ended)."""
    if not found:
        return LockState.FREE
    if holder_run_id == run_id:
        return LockState.OURS
    return LockState.HELD if holder_seconds_left > 0 else LockState.LEFT


class LockBusy(Exception):
    """The table's refusal: another run of the job holds the lock."""


def take_lock(state: LockState) -> LockStep:
    """The table's `take` from `state`; raises LockBusy where the table refuses it."""
    step = LOCK_TRANSITIONS[(state, LockEvent.TAKE)]
    if step.target is None:
        raise LockBusy(state)
    return step
