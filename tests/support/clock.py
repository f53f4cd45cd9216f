"""The tests' one fake clock: time that moves only when a test (or a sleep) moves it.

`FakeClock` stands in for an instance's wall clock wherever the code takes a `clock` callable
returning an aware UTC datetime (the ledger, the idempotency tokens), set and skewed at will.
`FakeMonotonic` stands in for `time.monotonic` and `time.sleep` together, so waits can be
compared exactly instead of timed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final


class FakeClock:
    """An instance's wall clock: starts at the real time plus `offset`, then stands still."""

    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self.now = datetime.now(UTC) + offset

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


class FakeMonotonic:
    """A monotonic clock that only moves when the code under test sleeps; sleeps are recorded."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# Today as this test process first saw it. A test that delivers runs at hh:mm of a past day
# computes each instant from this, never from the time of the call: a run across midnight
# would otherwise put half a test's instants on one day and half on the next.
SESSION_DAY: Final = datetime.now(UTC).date()
