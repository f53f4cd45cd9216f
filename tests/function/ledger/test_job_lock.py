"""The job lock's table (lifecycle/job_lock.py): a lock is taken from every state but `held`,
which refuses it with what the contender is told; and its state is read from the holder's run."""

from __future__ import annotations

import pytest

from exactly_once.ledger import lifecycle
from exactly_once.ledger.lifecycle import (
    LOCK_TRANSITIONS,
    LockBusy,
    LockEvent,
    LockState,
    lock_state,
    take_lock,
)


@pytest.mark.parametrize(
    ("found", "holder", "seconds_left", "state"),
    [
        (False, None, 0.0, LockState.FREE),
        (True, "run-a", 12.5, LockState.HELD),
        (True, "run-a", 0.0, LockState.LEFT),
        (True, None, 0.0, LockState.LEFT),  # a lock naming no run keeps nothing
        (True, "run-b", 30.0, LockState.OURS),  # an earlier attempt of this very run
    ],
)
def test_a_locks_state_is_read_from_its_holders_run(found, holder, seconds_left, state) -> None:
    assert lock_state(found, holder, "run-b", seconds_left) is state


def test_every_state_but_held_is_taken_and_held_refuses_with_the_lock_unchanged() -> None:
    for state in LockState:
        if state is LockState.HELD:
            with pytest.raises(LockBusy):
                take_lock(state)
            assert LOCK_TRANSITIONS[(state, LockEvent.TAKE)].target is None
        else:
            assert take_lock(state).target is LockState.HELD
    # Only the holder releases, and only a held lock: one row.
    assert [key for key in LOCK_TRANSITIONS if key[1] is LockEvent.RELEASE] == [
        (LockState.HELD, LockEvent.RELEASE)
    ]


def test_the_lock_table_is_the_lifecycle_packages() -> None:
    assert lifecycle.LOCK_TRANSITIONS is LOCK_TRANSITIONS
