"""What the function's own log lines say: how often each run's job returned, and how many
attempts the watchdog ended.

Read from the log file the local servers write, after the runs. A line is written before the
answer it goes with is sent, so a fault that loses the answer does not lose the line. Standard
library and the function's field names only: the function's tests read it on the runtime's
Python too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exactly_once import log_fields


def log_lines(log_path: Path) -> Iterator[dict[str, Any]]:
    """The function's structured lines (the servers' own output is skipped)."""
    if not log_path.exists():
        return
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            if isinstance(fields, dict):
                yield fields


def attempts_ended(log_path: Path) -> int:
    """Attempts the function's watchdog ended, counted from its log lines."""
    return sum(fields.get(log_fields.EVENT) == log_fields.ATTEMPT_ENDED for fields in log_lines(log_path))


def executions(log_path: Path, job_id: str) -> Counter[str]:
    """How often the job of each run (by ScheduleTime) returned: one delivery line with
    `job_returned: true` per attempt whose job ran to its end, whatever became of its answer.
    Any job's runs are counted so, the demo job's or a handler of your own."""
    return Counter(
        str(fields.get(log_fields.SCHEDULE_TIME))
        for fields in log_lines(log_path)
        if fields.get(log_fields.JOB) == job_id and fields.get(log_fields.JOB_RETURNED) is True
    )
