"""What each write of a run's record writes, as the table's rows say (lifecycle/table.py): the
claim's whole record, a renewal, the completing write, a release; and when a completed record's
retention ends."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from exactly_once.ledger.fields import (
    CHECKPOINT,
    CLAIMED_AT,
    COMPLETED_AT,
    EXPIRE_AT,
    RENEWED_AT,
    RESULT,
    SCHEDULE_TIME,
    TARGET,
    TRIGGER,
)
from exactly_once.ledger.lifecycle.states import (
    ATTEMPT_ID,
    BODY_SHA256,
    ERROR,
    LEASE_SECONDS,
    OUTPUT_JSON,
    STATUS,
    JobResult,
    Status,
)


def claimed_fields(
    *,
    attempt_id: str,
    lease: timedelta,
    expire_at: datetime,
    about: Mapping[str, Any],
    target: str,
    fingerprint: str,
    checkpoint_json: str | None,
    commit_time: Any,
) -> dict[str, Any]:
    """The record a claim writes (a create, or a takeover's whole update). Every field is
    always present (None until it applies), so a takeover replaces a completed record's
    leftovers too. `about` says which run it is (job, schedule time, trigger, project,
    location); `expire_at` only dates the TTL field (the lease runs from the commit);
    `commit_time` is the store's server timestamp."""
    return {
        STATUS: Status.IN_PROGRESS.value,
        ATTEMPT_ID: attempt_id,
        LEASE_SECONDS: lease.total_seconds(),
        EXPIRE_AT: expire_at,
        **about,
        TARGET: target or None,
        BODY_SHA256: fingerprint or None,
        CLAIMED_AT: commit_time,
        RENEWED_AT: None,
        COMPLETED_AT: None,
        RESULT: None,
        ERROR: None,
        OUTPUT_JSON: None,
        CHECKPOINT: checkpoint_json,
    }


def about_run(
    *, job_name: str, schedule_time: datetime, trigger: str, project: str, location: str
) -> dict[str, Any]:
    """Which run a record is, for operators and for the audit's queries."""
    return {
        "job_name": job_name,
        SCHEDULE_TIME: schedule_time,
        TRIGGER: trigger,
        "project": project,
        "location": location,
    }


def renewal_fields(checkpoint_json: str | None, commit_time: Any) -> dict[str, Any]:
    """A renewal: the lease starts again at its commit; a changed checkpoint rides along."""
    fields: dict[str, Any] = {RENEWED_AT: commit_time}
    if checkpoint_json is not None:
        fields[CHECKPOINT] = checkpoint_json
    return fields


def completion_fields(
    result: JobResult,
    *,
    error: str | None,
    output_json: str | None,
    expire_at: datetime,
    commit_time: Any,
    reported: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The completing write. `expire_at` is the claim's commit time plus retention, so retention
    is on Firestore's clock too; `reported` is what the job reported about its run (the
    downstream work a proxy started)."""
    return {
        **(reported or {}),
        STATUS: Status.COMPLETED.value,
        COMPLETED_AT: commit_time,
        EXPIRE_AT: expire_at,
        RESULT: result.value,
        ERROR: error,
        OUTPUT_JSON: output_json,
        CHECKPOINT: None,  # a completed run resumes nothing
    }


def retained_until(last_write: datetime, schedule_time: datetime | None, retention: timedelta) -> datetime:
    """When a completed record's retention ends: `retention` past the owner's last write, or
    past the run's ScheduleTime when that is later. A run claimed a few seconds early (a
    dispatch within the forced-run tolerance) would otherwise expire before it leaves a catch-up
    window as long as the retention, and catch-up would find it gone and deliver it again."""
    start = max(last_write, schedule_time) if schedule_time is not None else last_write
    return start + retention


def release_fields(checkpoint_json: str | None) -> dict[str, Any] | None:
    """A release or give-back: the record rewritten `released` with the checkpoint to keep, or
    None when there is none to keep and the record is deleted (one write either way). Either
    way the next claim owns the run at once."""
    if checkpoint_json is None:
        return None
    return {STATUS: Status.RELEASED.value, CHECKPOINT: checkpoint_json}
