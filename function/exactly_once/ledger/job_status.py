"""Each job's last result: one document per job, written in the commit that ends each run.

"When did this job last succeed, and how often has it failed since?" would otherwise need a
query over run records, which expire. The answer is kept current instead: the write that
completes a run (or releases it after a failure) carries a merge of the job's status document
in the same commit (ledger/writes.py), so the status changes exactly when the run's record
does, never for a stale owner, at no extra round trip. A success sets the last success and
resets the failure count; a failed attempt sets the last failure and increments the count
(Firestore's Increment: attempts of one job on two instances cannot lose each other's count).

For a job that pauses after failed runs (jobs[].pauseAfterFailures), the same merges keep the
set of its failing runs: a failed attempt adds its run's id (ArrayUnion: a run counts once
however many of its attempts fail, and retries on two instances cannot count it twice), a
success empties it. Other jobs' merges carry none of it, so their commits are unchanged. Whether
that set pauses the job is delivery/failure_pause.py's to decide.

The merge cannot be refused: it creates or updates the one document, and what it stores is
bounded (an output at most context.MAX_OUTPUT_BYTES, a reason at most errors.MAX_ERROR_BYTES),
so it never makes the run's own commit fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, cast

from google.api_core import exceptions as google_exceptions
from google.cloud import firestore

from exactly_once import strict_json
from exactly_once.ledger.fields import (
    CONSECUTIVE_FAILURES,
    ENDED_AT,
    FAILED_RUNS,
    FAILURE_PAUSED_AFTER,
    FAILURE_PAUSED_AT,
    FAILURE_RESUMED_AT,
    LAST_FAILURE,
    LAST_SUCCESS,
    OUTPUT_JSON,
    REASON,
    SCHEDULE_TIME,
    TRIGGER,
    job_status_collection,
    job_status_id,
)
from exactly_once.ledger.lifecycle import StoredRecord
from exactly_once.ledger.previous_run import PreviousRun
from exactly_once.ledger.store import COMMIT_TIME, with_retries
from exactly_once.ledger.writes import StagedWrite, WriteKind
from exactly_once.run_key import RunKey, Trigger


class JobStatuses:
    """The job status documents beside one runs collection, one per run key (RunKey.key_name),
    so a job renamed with its run key kept reads the status its runs before the rename left.
    `pause_after_failures` holds the jobs with pauseAfterFailures, by job id: only theirs keep
    their failing runs."""

    def __init__(
        self,
        client: firestore.Client,
        runs_collection: str,
        pause_after_failures: Mapping[str, int] | None = None,
    ) -> None:
        self._client = client
        self._collection = client.collection(job_status_collection(runs_collection))
        self.pause_after_failures: Mapping[str, int] = dict(pause_after_failures or {})

    def document(self, key: RunKey) -> firestore.DocumentReference:
        return self.document_of(key.project, key.location, key.key_name)

    def document_of(self, project: str, location: str, job_name: str) -> firestore.DocumentReference:
        return cast(
            firestore.DocumentReference, self._collection.document(job_status_id(project, location, job_name))
        )

    def succeeded(self, key: RunKey, run_id: str, output_json: str | None) -> StagedWrite:
        """The merge a run's completing commit carries when the job succeeded."""
        last = {**_run_fields(key, run_id), OUTPUT_JSON: output_json}
        fields: dict[str, Any] = {LAST_SUCCESS: last, CONSECUTIVE_FAILURES: 0}
        if key.job_name in self.pause_after_failures:
            fields.update(NOT_PAUSED)
        return self._merge(fields, key)

    def failed(self, key: RunKey, run_id: str, reason: str) -> StagedWrite:
        """The merge a failed attempt's ending commit (terminal completion or release) carries."""
        last = {**_run_fields(key, run_id), REASON: reason}
        fields: dict[str, Any] = {LAST_FAILURE: last, CONSECUTIVE_FAILURES: firestore.Increment(1)}
        if key.job_name in self.pause_after_failures:
            fields[FAILED_RUNS] = firestore.ArrayUnion([run_id])
        return self._merge(fields, key)

    def read(self, key: RunKey, *, timeout: float) -> StoredRecord | None:
        """The job's status document as one read saw it (None: the job never ended a run)."""
        document = self.document(key)
        snapshot = with_retries(timeout, lambda seconds: document.get(retry=None, timeout=seconds))
        if not snapshot.exists:
            return None
        return StoredRecord(snapshot.to_dict() or {}, snapshot.update_time, snapshot.read_time)

    def record_pause(
        self, key: RunKey, *, as_read: datetime, failed_runs: Sequence[str], timeout: float
    ) -> bool:
        """Record that the job is paused after `failed_runs`, only if its status is still as read
        at `as_read`: of deliveries that found the pause together, exactly one records it. False
        when the document changed since (another delivery recorded it, or a run ended)."""
        document = self.document(key)
        option = self._client.write_option(last_update_time=as_read)
        fields = {FAILURE_PAUSED_AT: COMMIT_TIME, FAILURE_PAUSED_AFTER: list(failed_runs)}
        try:
            with_retries(
                timeout, lambda seconds: document.update(fields, option=option, retry=None, timeout=seconds)
            )
        except (google_exceptions.FailedPrecondition, google_exceptions.NotFound):
            return False
        return True

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


# What a success (and a resume) makes of a pausing job's failure count: no failing runs, no
# pause.
NOT_PAUSED: Final[Mapping[str, Any]] = {FAILED_RUNS: [], FAILURE_PAUSED_AT: None, FAILURE_PAUSED_AFTER: None}


def resume_fields() -> dict[str, Any]:
    """What `ops resume` merges into a paused job's status: its failing runs forgotten, so its
    next run executes and pauseAfterFailures more failures pause it again."""
    return {**NOT_PAUSED, FAILURE_RESUMED_AT: COMMIT_TIME}


def _run_fields(key: RunKey, run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        SCHEDULE_TIME: key.schedule_time,
        TRIGGER: key.trigger.value,
        ENDED_AT: COMMIT_TIME,
    }
