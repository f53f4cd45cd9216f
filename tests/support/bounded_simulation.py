"""The local scheduler's simulation with a hard deadline: a hung simulation fails its test
instead of holding the whole run."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from localrun.simulation import simulate

HARD_TIMEOUT_SECONDS = 180.0


def simulate_bounded(**kwargs: Any) -> dict[str, Any]:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["report"] = simulate(**kwargs)
        except BaseException as error:  # re-raised in the test thread
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HARD_TIMEOUT_SECONDS)
    if thread.is_alive():
        pytest.fail(f"the simulation did not finish within {HARD_TIMEOUT_SECONDS}s")
    if "error" in outcome:
        raise outcome["error"]
    report: dict[str, Any] = outcome["report"]
    return report
