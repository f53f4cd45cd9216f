"""A job whose first attempt of a run stalls, for the tests that end an attempt from outside
the job (its watchdog, its backstop): served by a real Functions Framework process
(JOB_HANDLER=tests.function.stalling_jobs:stall_first_attempt, the repository root on
PYTHONPATH).

Every attempt writes its mark (marked_jobs.MARKS) before anything else, so the tests count
the attempts that started and the one that finished. The first attempt of a run then stalls
as its body says and never writes again, so whatever ends it, nothing it does after the
stall can reach Firestore:

- `sleep`: waits in a call that releases the GIL, as a job blocked on a slow peer does;
- `hog`: matches a catastrophic regular expression, one C call of 2**64 backtracking steps
  that never releases the GIL: no other thread of the process runs again.

Every later attempt of the run marks itself finished and returns.
"""

from __future__ import annotations

import re
import time

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from exactly_once import RunContext, TerminalJobError, firestore_client
from tests.function.marked_jobs import MARKS

STALLS = ("sleep", "hog")
# Longer than any test waits for the attempt to be ended.
SLEEP_SECONDS = 600.0


def stall_first_attempt(context: RunContext) -> dict[str, str]:
    stall = context.json_body(allowed_fields=("stall",)).get("stall", "sleep")
    if stall not in STALLS:
        raise TerminalJobError(f"stall {stall!r} is not one of {STALLS}")
    marks = firestore_client().collection(MARKS)
    earlier = marks.where(filter=FieldFilter("run_id", "==", context.run_id)).limit(1).get()
    marks.document(context.attempt_id).set(
        {"run_id": context.run_id, "started_at": firestore.SERVER_TIMESTAMP}
    )
    if not earlier:
        if stall == "hog":
            re.match(r"(a+)+$", "a" * 64 + "b")
        time.sleep(SLEEP_SECONDS)
    marks.document(context.attempt_id).update({"alive_at": firestore.SERVER_TIMESTAMP, "finished": True})
    return {"finished": context.attempt_id}
