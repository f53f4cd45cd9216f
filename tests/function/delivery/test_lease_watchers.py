"""The threads that watch attempts' leases are kept for the next attempt, and there are always
enough of them: an attempt never waits for a watcher while another attempt holds one."""

from __future__ import annotations

import threading

from exactly_once.delivery.heartbeat import Watchers
from tests.support.waiting import wait_until


class Attempt:
    """Stands in for a LeaseKeeper: records which thread watched it, and for how long."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.watched = threading.Event()
        self.thread = ""
        self._hold = hold

    def watch(self) -> None:
        self.thread = threading.current_thread().name
        self.watched.set()
        if self._hold is not None:
            self._hold.wait(timeout=30)


def test_a_watcher_whose_attempt_ended_watches_the_next_one():
    watchers = Watchers()
    first, second = Attempt(), Attempt()
    watchers.watch(first)
    assert first.watched.wait(timeout=30)
    wait_until(lambda: watchers.idle == 1, timeout=30, what="the watcher to be free again")
    watchers.watch(second)
    assert second.watched.wait(timeout=30)
    assert second.thread == first.thread
    assert threading.current_thread().name != first.thread


def test_concurrent_attempts_each_get_a_watcher_at_once():
    watchers = Watchers()
    release = threading.Event()
    attempts = [Attempt(hold=release) for _ in range(5)]
    try:
        for attempt in attempts:
            watchers.watch(attempt)
        for attempt in attempts:
            assert attempt.watched.wait(timeout=30)  # none waits for another to end
        assert len({attempt.thread for attempt in attempts}) == 5
    finally:
        release.set()
    wait_until(lambda: watchers.idle == 5, timeout=30, what="every watcher to be free again")
