"""Names of run-record fields that others read outside the ledger, and the one rule read there.

Kept apart from protocol.py (which needs the Firestore client library) so the Pulumi program can
import them: the TTL policy and the indexing exemptions must name exactly the fields the
ledger writes. What a record's fields mean for its run is the lifecycle's (lifecycle.py).
"""

from __future__ import annotations

from typing import Final

# The TTL field of run records, token records and job locks: Firestore deletes a document
# some time after this moment.
EXPIRE_AT: Final = "expire_at"
CLAIMED_AT: Final = "claimed_at"
COMPLETED_AT: Final = "completed_at"
# The commit time of the owner's last lease renewal (null until the job outlives a renewal).
RENEWED_AT: Final = "renewed_at"
SCHEDULE_TIME: Final = "schedule_time"
# Which run the record is (delivery/scheduler_request.Trigger): "scheduled", or "forced" for a
# run forced ahead of the ScheduleTime it carries.
TRIGGER: Final = "trigger"
# How a completed run ended (ledger/lifecycle.JobResult); "succeeded" when absent.
RESULT: Final = "result"
# The job's latest checkpoint (JSON text) as of the owner's last renewal or its release: what
# an attempt that takes the run over resumes from. A completion clears it.
CHECKPOINT: Final = "checkpoint_json"
# What claimed the run (@exactly_once(target=...), by default the Cloud Run service), so that two functions
# sharing a runs collection and a job name cannot decide each other's runs.
TARGET: Final = "target"

# Each job's last result: one document per job (ledger/job_status.py), in a collection of its
# own beside the runs, written in the same commit that ends each run. Never expires: it is as
# old as the job's last run, whatever the retention.
JOB_STATUS_COLLECTION_SUFFIX: Final = "_job_status"
# Maps of the job's last successful run and last failed attempt, and the failed attempts since
# that success (a job that raised, retried or terminally; reset to 0 by a success).
LAST_SUCCESS: Final = "last_success"
LAST_FAILURE: Final = "last_failure"
CONSECUTIVE_FAILURES: Final = "consecutive_failures"
# Only for a job with pauseAfterFailures (ledger/lifecycle/job_state.py): the ids of the runs that
# failed since its last success, each once however many of its attempts failed (a success and
# `ops resume` empty it); when the pause was first found (Firestore's clock) and which runs
# caused it (null while the job is not paused); when `ops resume` last ended a pause.
FAILED_RUNS: Final = "failed_runs"
FAILURE_PAUSED_AT: Final = "failure_paused_at"
FAILURE_PAUSED_AFTER: Final = "failure_paused_after"
FAILURE_RESUMED_AT: Final = "failure_resumed_at"
# The run a paused job skipped last: what the skip's conditioned write of the status sets.
LAST_SKIPPED_RUN: Final = "last_skipped_run"
# Inside LAST_SUCCESS and LAST_FAILURE, beside SCHEDULE_TIME, TRIGGER and "run_id": when the
# run's ending commit was made (Firestore's clock), the stored output, the failure's reason.
ENDED_AT: Final = "ended_at"
OUTPUT_JSON: Final = "output_json"
REASON: Final = "reason"


def job_status_collection(runs_collection: str) -> str:
    """Where the job status documents of the runs in `runs_collection` live."""
    return f"{runs_collection}{JOB_STATUS_COLLECTION_SUFFIX}"


def job_status_id(project: str, location: str, job_name: str) -> str:
    """A job's status document id, readable in the console: none of the three may hold "|"
    (delivery/scheduler_request.py), so the id names exactly one (project, location, job)."""
    return f"{project}|{location}|{job_name}"


# Fields whose values only ever grow and that no query filters on. Left indexed, every new
# record's entry would land at the end of the same index range, which caps the collection at
# about 500 writes a second; exempt, the writes spread like the document ids do.
UNINDEXED_RUN_FIELDS: Final = (CLAIMED_AT, RENEWED_AT, COMPLETED_AT, SCHEDULE_TIME)
