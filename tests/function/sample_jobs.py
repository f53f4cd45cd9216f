"""Job handlers for the handler tests, resolved through JOB_HANDLER like real ones."""

from __future__ import annotations

import threading
from collections.abc import Callable

import functions_framework

from exactly_once import RunContext, TerminalJobError, exactly_once

CALLS: list[RunContext] = []
DURING_JOB: Callable[[RunContext], None] | None = None
_lock = threading.Lock()


def record_call(context: RunContext) -> None:
    with _lock:
        CALLS.append(context)


def fail_retryable(context: RunContext) -> None:
    raise ConnectionError("downstream timed out")


def fail_terminal(context: RunContext) -> None:
    raise TerminalJobError("downstream said 404")


def run_hook(context: RunContext) -> None:
    if DURING_JOB is not None:
        DURING_JOB(context)


def fail_terminal_with(message: str):
    """A terminal failure whose message the test chooses (huge, unencodable...)."""

    def job(context: RunContext) -> None:
        record_call(context)
        raise TerminalJobError(message)

    return job


@functions_framework.http
@exactly_once
def served_on_its_own(run: RunContext) -> None:
    """A job served as an HTTP function of its own: not something the router can call."""
