"""A proxy job under a short time limit, for the proxy tests: the settings, and what the
function's log says the attempt came to.

A call whose answer is held (the fakes' HELD) would take its whole call timeout, far past a
short limit; cut to the attempt's time left, it fails retryably and the attempt is released
instead of being ended by the watchdog mid-call (exactly_once/targets/call_timeout.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exactly_once import log_fields
from exactly_once.targets.call_timeout import CALL_MARGIN_SECONDS, MIN_CALL_SECONDS
from localrun.function_log import log_lines

# Room for a claim and a first call, far short of any call timeout.
SHORT_TIME_LIMIT = {"JOB_TIME_LIMIT_SECONDS": "5"}
# Less than a call and its margin from the start: no call is made at all.
TOO_SHORT_FOR_A_CALL = {"JOB_TIME_LIMIT_SECONDS": f"{(MIN_CALL_SECONDS + CALL_MARGIN_SECONDS) * 0.75:g}"}


def released_errors(log_path: Path) -> list[str]:
    """The error of every delivery answered failed_released."""
    return [
        str(line.get("error", ""))
        for line in log_lines(log_path)
        if line.get(log_fields.OUTCOME) == "failed_released"
    ]


def ended_attempts(log_path: Path) -> list[dict[str, Any]]:
    """The watchdog's lines: attempts ended with their instance."""
    return [line for line in log_lines(log_path) if line.get(log_fields.EVENT) == log_fields.ATTEMPT_ENDED]
