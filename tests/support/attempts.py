"""What the watchdog does in-process: record the reason instead of ending the test's process."""

from __future__ import annotations

import threading


class EndedAttempts:
    """An `end_attempt` for ScheduledRunHandler: records why, and lets a cooperative test job
    see that its attempt was ended (a real instance would be gone)."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.ended = threading.Event()

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.ended.set()
