"""The job the soak's instances run in place of the stack's handler (JOB_HANDLER): the demo
job's shape, with an execution record no fault touches, and the job-side faults on demand.

Body (JSON): {"tag": <the soak's name of the run>, "sleep_seconds": <float>, "action": ...}.
The job appends `start` to the execution file, sleeps (its work), then appends `end` (its
side effect) and returns. `action` makes it misbehave as a job can:

- "raise": raises before its side effect (a retryable failure: the claim is released);
- "exit": calls sys.exit() before its side effect (the same, by another road);
- "too_large" / "not_json": does its work, then returns a value the run cannot store (a
  terminal failure, recorded: the run executed once and failed).

A sleep past the time limit is a hung job, ended by the function's watchdog.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# The soak's instances have this directory on their PYTHONPATH; its package name is the checker's.
import soak_record  # type: ignore[import-not-found,unused-ignore]

from exactly_once import RetryableJobError, RunContext, TerminalJobError

FIELDS = ("tag", "sleep_seconds", "action")
ACTIONS = ("raise", "exit", "too_large", "not_json")
# More than a run may store (exactly_once.context.MAX_OUTPUT_BYTES is 64 KiB).
TOO_LARGE_BYTES = 128 * 1024


class SoakJobFailure(RuntimeError):
    """The failure the body asked for."""


def run_soak_job(context: RunContext) -> Any:
    body = context.json_body(allowed_fields=FIELDS)
    tag, sleep_seconds, action = body.get("tag"), body.get("sleep_seconds", 0), body.get("action")
    if not isinstance(tag, str) or not tag:
        raise TerminalJobError("body field tag must be a non-empty string")
    if isinstance(sleep_seconds, bool) or not isinstance(sleep_seconds, int | float) or sleep_seconds < 0:
        raise TerminalJobError("body field sleep_seconds must be a number of seconds, 0 or more")
    if action is not None and action not in ACTIONS:
        raise TerminalJobError(f"body field action must be one of {list(ACTIONS)}")
    path = os.environ[soak_record.EXECUTIONS_FILE_ENV]
    about = {"attempt_id": context.attempt_id, "fence": context.fence, "at": time.time()}
    soak_record.append(path, soak_record.START, tag, **about)
    time.sleep(sleep_seconds)
    if action == "raise":
        raise SoakJobFailure("the request body asked this run to fail")
    if action == "exit":
        sys.exit(3)
    if context.seconds_left() <= 0:
        # Past its time limit before its side effect: the instance was frozen (or starved)
        # while the job worked, and a retry may have taken the run over meanwhile. The
        # function's watchdog ends such an attempt as the process thaws, but the job's own
        # thread may wake first: a job whose side effect cannot refuse a stale writer (this
        # file cannot) checks the time left before it, as a long job does between its steps (docs/jobs.md).
        raise RetryableJobError("past the time limit before the side effect: left to a retry")
    soak_record.append(path, soak_record.END, tag, **{**about, "at": time.time()})
    if action == "too_large":
        return {"padding": "x" * TOO_LARGE_BYTES}
    if action == "not_json":
        return {"value": float("nan")}
    return {"tag": tag}
