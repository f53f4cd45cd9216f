"""Each job's last result: one document per job, written in the commit that ends each run.

"When did this job last succeed, and how often has it failed since?" would otherwise need a
query over run records, which expire. The answer is kept current instead: the write that
completes a run (or releases it after a failure) carries a merge of the job's status document
in the same commit (ledger/writes.py), so the status changes exactly when the run's record
does, never for a stale owner, at no extra round trip. A success sets the last success and
resets the failure count; a failed attempt sets the last failure and increments the count
(Firestore's Increment: attempts of one job on two instances cannot lose each other's count).

The merge cannot be refused: it creates or updates the one document, and what it stores is
bounded (an output at most context.MAX_OUTPUT_BYTES, a reason at most errors.MAX_ERROR_BYTES),
so it never makes the run's own commit fail.
"""

from __future__ import annotations

from typing import Any, cast

from google.cloud import firestore

from exactly_once import strict_json
from exactly_once.ledger.fields import (
    CONSECUTIVE_FAILURES,
    ENDED_AT,
    LAST_FAILURE,
    LAST_SUCCESS,
    OUTPUT_JSON,
    REASON,
    SCHEDULE_TIME,
    TRIGGER,
    job_status_collection,
    job_status_id,
)
from exactly_once.ledger.previous_run import PreviousRun
from exactly_once.ledger.store import COMMIT_TIME, with_retries
from exactly_once.ledger.writes import StagedWrite, WriteKind
from exactly_once.run_key import RunKey, Trigger


class JobStatuses:
    """The job status documents beside one runs collection, one per run key (RunKey.key_name),
    so a job renamed with its run key kept reads the status its runs before the rename left."""

    def __init__(self, client: firestore.Client, runs_collection: str) -> None:
        self._collection = client.collection(job_status_collection(runs_collection))

    def document(self, key: RunKey) -> firestore.DocumentReference:
        return cast(
            firestore.DocumentReference,
            self._collection.document(job_status_id(key.project, key.location, key.key_name)),
        )

    def succeeded(self, key: RunKey, run_id: str, output_json: str | None) -> StagedWrite:
        """The merge a run's completing commit carries when the job succeeded."""
        last = {**_run_fields(key, run_id), OUTPUT_JSON: output_json}
        return self._merge({LAST_SUCCESS: last, CONSECUTIVE_FAILURES: 0}, key)

    def failed(self, key: RunKey, run_id: str, reason: str) -> StagedWrite:
        """The merge a failed attempt's ending commit (terminal completion or release) carries."""
        last = {**_run_fields(key, run_id), REASON: reason}
        return self._merge({LAST_FAILURE: last, CONSECUTIVE_FAILURES: firestore.Increment(1)}, key)

    def _merge(self, fields: dict[str, Any], key: RunKey) -> StagedWrite:
        about = {"job_name": key.job_name, "project": key.project, "location": key.location}
        return StagedWrite(WriteKind.SET, self.document(key), {**about, **fields}, merge=True)

    def last_success(self, key: RunKey, *, timeout: float) -> PreviousRun | None:
        """The job's last successful run: one read, retried like the ledger's within `timeout`."""
        document = self.document(key)
        snapshot = with_retries(timeout, lambda seconds: document.get(retry=None, timeout=seconds))
        last = (snapshot.to_dict() or {}).get(LAST_SUCCESS) if snapshot.exists else None
        if not isinstance(last, dict):
            return None
        output_json = last.get(OUTPUT_JSON)
        return PreviousRun(
            schedule_time=last[SCHEDULE_TIME],
            output=strict_json.loads(output_json) if isinstance(output_json, str) else None,
            run_id=str(last.get("run_id", "")),
            forced=last.get(TRIGGER) == Trigger.FORCED,
        )


def _run_fields(key: RunKey, run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        SCHEDULE_TIME: key.schedule_time,
        TRIGGER: key.trigger.value,
        ENDED_AT: COMMIT_TIME,
    }
