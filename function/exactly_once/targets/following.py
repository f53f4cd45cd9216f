"""Following a run's downstream work after its attempt: ask the API, record what changed.

A proxy run's record says what it started and in which state (targets/downstream.py). Two
readers ask the downstream API again while the record says `running`: a run of a `skip` or
`wait` job whose lock the previous run still holds (delivery/overlap.py), and the stack's
audit job (jobs/missed_runs.py). Either records a change with a write conditioned on the
record as it read it, so two of them never both record (and log) the same end: the one whose
write commits logs a failed end as one `downstream_failed` line, which the stack alerts on.

Each kind's API is asked through its proxy job's official client, by the function the proxy
module exposes for it (FOLLOWERS), imported when first needed: most instances never follow.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, TextIO

from exactly_once import log_fields, structured_log
from exactly_once.delivery.scheduler_request import format_rfc3339
from exactly_once.ledger.store import COMMIT_TIME, RunStore, StaleWrite, StoredRecord
from exactly_once.targets.downstream import (
    BIGQUERY,
    CLOUD_RUN_JOB,
    DOWNSTREAM_CHECKED_AT,
    WORKFLOW,
    Downstream,
    DownstreamState,
)

# Reads the current state of a started piece of work through its API; the second argument
# is the call's timeout in seconds. Raises a GoogleAPIError when the API does not answer.
Follower = Callable[[Downstream, float], Downstream]

# Each kind's follower: "module:function" in function/jobs/, beside the proxy that starts it.
FOLLOWERS: Final[Mapping[str, str]] = {
    CLOUD_RUN_JOB: "jobs.cloud_run_job:execution_state",
    WORKFLOW: "jobs.workflows:execution_state",
    BIGQUERY: "jobs.bigquery_job:job_state",
}


class UnknownKind(LookupError):
    """A record names a kind of downstream work this function cannot follow."""


def follower(kind: str) -> Follower:
    path = FOLLOWERS.get(kind)
    if path is None:
        raise UnknownKind(f"no follower for downstream kind {kind!r}; known: {sorted(FOLLOWERS)}")
    module, _, name = path.partition(":")
    found: Follower = getattr(importlib.import_module(module), name)
    return found


def follow(
    store: RunStore,
    run_id: str,
    stored: StoredRecord,
    *,
    timeout: float,
    seen_by: str,
    log_stream: TextIO | None = None,
) -> Downstream | None:
    """The run's downstream work as its API reports it now (None: the run started none).
    Asked only while the record says running; a change is recorded on the run (a write
    conditioned on `stored`), and a failed end logged, by the one caller whose write commits.
    Raises what the API raises when it does not answer, and UnknownKind."""
    known = Downstream.from_record(stored.fields)
    if known is None or known.state.ended:
        return known
    current = follower(known.kind)(known, timeout)
    if current.state is known.state:
        return current
    fields = {**current.fields(), DOWNSTREAM_CHECKED_AT: COMMIT_TIME}
    try:
        store.update(run_id, fields, if_updated_at=stored.update_time, timeout=timeout)
    except StaleWrite:
        return current  # changed meanwhile: whoever changed it recorded (and logged) it
    if current.state.failed:
        log_failed(stored.fields, run_id, current, seen_by=seen_by, log_stream=log_stream)
    return current


def log_failed(
    record: Mapping[str, Any],
    run_id: str,
    downstream: Downstream,
    *,
    seen_by: str,
    log_stream: TextIO | None = None,
) -> None:
    """One ERROR line for a downstream execution that failed or was cancelled, with the
    API's error: what the stack's downstream-failure alert counts."""
    job = record.get("job_name")
    schedule_time = record.get("schedule_time")
    when = format_rfc3339(schedule_time) if isinstance(schedule_time, datetime) else None
    fields: dict[str, Any] = {
        log_fields.EVENT: log_fields.DOWNSTREAM_FAILED,
        log_fields.JOB: job,
        log_fields.RUN_ID: run_id,
        log_fields.SCHEDULE_TIME: when,
        **downstream.fields(),
        "seen_by": seen_by,
    }
    what = f"{downstream.kind} {downstream.name} {downstream.state.value}"
    error = f": {downstream.error}" if downstream.error else ""
    message = f"{log_fields.DOWNSTREAM_FAILED}: job {job} run {run_id}: {what}{error}"
    structured_log.emit("ERROR", message, fields, log_stream)


__all__ = ["FOLLOWERS", "Downstream", "DownstreamState", "Follower", "UnknownKind", "follow", "follower"]
