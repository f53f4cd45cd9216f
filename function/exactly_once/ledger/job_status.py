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
however many of its attempts fail, and retries on two instances cannot count it twice), and any
success empties it, whatever the serving function's job table says. Other jobs' failures add
nothing, so their commits are unchanged. What that set makes of the job is ledger/lifecycle/job_state.py's
to decide; the one write decided on a read of this document, a paused job's skip, is conditioned
on that read (`skipped`).

The merges cannot be refused: each creates or updates the one document, and what it stores is
bounded (an output at most context.MAX_OUTPUT_BYTES, a reason at most errors.MAX_ERROR_BYTES),
so it never makes the run's own commit fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.cloud import firestore

from exactly_once import strict_json
from exactly_once.ledger.fields import (
    CONSECUTIVE_FAILURES,
    ENDED_AT,
    FAILED_RUNS,
    LAST_FAILURE,
    LAST_SUCCESS,
    OUTPUT_JSON,
    REASON,
    SCHEDULE_TIME,
    TRIGGER,
    job_status_collection,
    job_status_id,
)
from exactly_once.ledger.lifecycle import StoredRecord, job_state
from exactly_once.ledger.lifecycle.job_state import NOT_PAUSED, JobStatus, Skip
from exactly_once.ledger.previous_run import PreviousRun
from exactly_once.ledger.store import COMMIT_TIME, RunStore
from exactly_once.ledger.writes import StagedWrite, WriteKind
from exactly_once.run_key import RunKey, Trigger


class JobStatuses:
    """The job status documents beside one runs collection, one per run key (RunKey.key_name),
    so a job renamed with its run key kept reads the status its runs before the rename left.
    `pause_after_failures` holds the jobs with pauseAfterFailures, by job id: only theirs keep
    their failing runs."""

    def __init__(
        self,
        store: RunStore,
        runs_collection: str,
        pause_after_failures: Mapping[str, int] | None = None,
    ) -> None:
        self._store = store
        self._collection = job_status_collection(runs_collection)
        self.pause_after_failures: Mapping[str, int] = dict(pause_after_failures or {})

    def document(self, key: RunKey) -> firestore.DocumentReference:
        return self.document_of(key.project, key.location, key.key_name)

    def document_of(self, project: str, location: str, job_name: str) -> firestore.DocumentReference:
        return self._store.reference(self._path(project, location, job_name))

    def _path(self, project: str, location: str, job_name: str) -> str:
        return f"{self._collection}/{job_status_id(project, location, job_name)}"

    def _read(self, key: RunKey, timeout: float) -> StoredRecord | None:
        return self._store.read(self._path(key.project, key.location, key.key_name), timeout=timeout)

    def succeeded(self, key: RunKey, run_id: str, output_json: str | None) -> StagedWrite:
        """The merge a run's completing commit carries when the job succeeded: it ends any
        streak, also one a table with pauseAfterFailures left before this one dropped the key."""
        last = {**_run_fields(key, run_id), OUTPUT_JSON: output_json}
        return self._merge({LAST_SUCCESS: last, CONSECUTIVE_FAILURES: 0, **NOT_PAUSED}, key)

    def failed(self, key: RunKey, run_id: str, reason: str) -> StagedWrite:
        """The merge a failed attempt's ending commit (terminal completion or release) carries."""
        last = {**_run_fields(key, run_id), REASON: reason}
        fields: dict[str, Any] = {LAST_FAILURE: last, CONSECUTIVE_FAILURES: firestore.Increment(1)}
        if key.job_name in self.pause_after_failures:
            fields[FAILED_RUNS] = firestore.ArrayUnion([run_id])
        return self._merge(fields, key)

    def read(self, key: RunKey, *, timeout: float) -> JobStatus:
        """The job's status as one read saw it (empty: the job never ended a run)."""
        return JobStatus.of(self._read(key, timeout))

    def skipped(self, key: RunKey, run_id: str, status: JobStatus, skip: Skip) -> StagedWrite:
        """The write a paused job's skip of `run_id` carries in its commit: the pause when it
        records it (job_state.Skip), conditioned on `status` as read, so the skip is refused
        whole when a success, a failure or a resume changed the status since."""
        assert status.update_time is not None  # a job without a status has no streak to skip on
        fields = skip.fields(run_id, COMMIT_TIME)
        return StagedWrite(WriteKind.UPDATE, self.document(key), fields, if_updated_at=status.update_time)

    def _merge(self, fields: dict[str, Any], key: RunKey) -> StagedWrite:
        about = {"job_name": key.job_name, "project": key.project, "location": key.location}
        return StagedWrite(WriteKind.SET, self.document(key), {**about, **fields}, merge=True)

    def last_success(self, key: RunKey, *, timeout: float) -> PreviousRun | None:
        """The job's last successful run: one read, retried like the ledger's within `timeout`."""
        status = self._read(key, timeout)
        last = status.fields.get(LAST_SUCCESS) if status is not None else None
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


def resume_fields() -> dict[str, Any]:
    """What `ops resume` merges into a paused job's status (job_state.resume_fields)."""
    return job_state.resume_fields(COMMIT_TIME)
