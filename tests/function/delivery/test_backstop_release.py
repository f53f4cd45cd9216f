"""The end of an attempt leaves faulthandler's timer to the attempt's watcher: cancelling joins
faulthandler's C thread while holding the interpreter lock, which the request thread need not
wait for. In process, with faulthandler's two functions recorded instead of called."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest

from exactly_once.delivery import heartbeat
from exactly_once.delivery.heartbeat import LeaseKeeper, end_instance
from exactly_once.ledger.protocol import new_attempt_id
from tests.support.ledger_runs import KEY, ledger_on
from tests.support.waiting import wait_until


@pytest.fixture
def timer_calls(monkeypatch):
    """(call, thread name) for every arm and cancel of faulthandler's timer; nothing is armed."""
    calls: list[tuple[str, str]] = []

    def arm(seconds: float, exit: bool) -> None:
        calls.append(("arm", threading.current_thread().name))

    def cancel() -> None:
        calls.append(("cancel", threading.current_thread().name))

    monkeypatch.setattr(heartbeat, "_DUMP_LATER", arm)
    monkeypatch.setattr(heartbeat, "_CANCEL_DUMP", cancel)
    return calls


def test_the_request_thread_arms_and_the_watcher_cancels(db, timer_calls):
    ledger = ledger_on(db)
    request_thread = threading.current_thread().name
    # Two attempts of two runs: the second one's watcher is the thread kept from the first.
    for key in (KEY, replace(KEY, schedule_time=KEY.schedule_time + timedelta(minutes=1))):
        claim = ledger.claim(key, new_attempt_id())
        seen = len(timer_calls)
        with LeaseKeeper(ledger, claim, ends_at=time.monotonic() + 600, end_attempt=end_instance):
            assert timer_calls[seen:] == [("arm", request_thread)]  # armed before the job runs

        def cancelled(seen: int = seen) -> list[tuple[str, str]] | None:
            return [call for call in timer_calls[seen:] if call[0] == "cancel"] or None

        cancels = wait_until(cancelled, timeout=30, what="the watcher to cancel the timer")
        ((_, thread),) = cancels
        assert thread.startswith("lease-watch-")
        assert not heartbeat._UNSETTLED and not heartbeat._ARMED
