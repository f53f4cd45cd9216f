"""Jobs for the end-to-end tests that must see *when* each attempt ran, not only how often:
served by a real Functions Framework process (JOB_HANDLER=tests.function.marked_jobs:...,
with the repository root on PYTHONPATH).

Each attempt keeps one document, `attempt_marks/{attempt_id}`, whose `started_at` and
`alive_at` are Firestore commit times: comparable across processes whatever their clocks.
Two attempts of one run executed at the same time exactly when one's [started_at, alive_at]
interval overlaps the other's.
"""

from __future__ import annotations

import time

from google.cloud import firestore

from exactly_once import RunContext, TerminalJobError, firestore_client

MARKS = "attempt_marks"
# How often a running attempt proves it is still executing.
ALIVE_EVERY_SECONDS = 0.25


def marked_sleep(context: RunContext) -> dict[str, float]:
    """Sleep `seconds` (body), marking the attempt alive all along; ignores its time limit,
    as a hung or careless job would."""
    seconds = float(context.json_body(allowed_fields=("seconds",)).get("seconds", 0))
    mark = firestore_client().collection(MARKS).document(context.attempt_id)
    mark.set({"run_id": context.run_id, "started_at": firestore.SERVER_TIMESTAMP})
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        mark.update({"alive_at": firestore.SERVER_TIMESTAMP})
        time.sleep(ALIVE_EVERY_SECONDS)
    mark.update({"alive_at": firestore.SERVER_TIMESTAMP, "finished": True})
    return {"slept": seconds}


def fail_terminally(context: RunContext) -> None:
    """A terminal failure whose message the body spells: `text` repeated `repeat` times (a
    JSON string can carry a lone surrogate, which Firestore cannot store as it is)."""
    body = context.json_body(allowed_fields=("text", "repeat"))
    mark = firestore_client().collection(MARKS).document(context.attempt_id)
    mark.set({"run_id": context.run_id, "started_at": firestore.SERVER_TIMESTAMP})
    raise TerminalJobError(str(body.get("text", "")) * int(body.get("repeat", 1)))
