"""The missed-run audit as one more scheduled job of the stack, and what it needs to know.

Pulumi-free, like infra/settings/stack.py: the Pulumi program, the `ops` CLI and the tests all read
the audit's facts from here, so the job the stack deploys and the audit an operator runs by
hand judge runs by the same windows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime

from exactly_once.audit.config import AuditConfig, AuditedJob, Redelivery
from exactly_once.config import OverlapPolicy
from infra.plan.catchup import catchup_delivery
from infra.settings.jobs import AUDIT_JOB_NAME, DEFAULT_RETRY, JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.timing import audit_cadence as cadence
from policy.scheduler_guardrails.rules.timing.rules import (
    MAX_ATTEMPT_DEADLINE_SECONDS,
    MIN_ATTEMPT_DEADLINE_SECONDS,
    RetryConfig,
)

AUDIT_HANDLER = "jobs.missed_runs:audit_missed_runs"
# Hourly: a missed run is reported at most an hour after its last retry could have ended.
# (Every two hours when the lease is so long that the audit's own retries need longer.)
AUDIT_MINUTE = 5


def retry_window_seconds(settings: StackSettings, job: JobSettings) -> float:
    """From a run's schedule time until no attempt of it can still arrive or be running."""
    return cadence.retry_window(job.retry, job.attempt_deadline_seconds, settings.lease_seconds)


def _first_backoff(settings: StackSettings) -> float:
    return cadence.first_backoff(settings.lease_seconds, DEFAULT_RETRY.min_backoff_seconds)


def audit_interval_hours(settings: StackSettings) -> int:
    """Hours between audit runs (policy/scheduler_guardrails/rules/timing/audit_cadence.py)."""
    return cadence.audit_interval_hours(settings.lease_seconds, DEFAULT_RETRY.min_backoff_seconds)


def audit_interval_seconds(settings: StackSettings) -> float:
    return audit_interval_hours(settings) * 3600.0


def audit_schedule(settings: StackSettings) -> str:
    hours = audit_interval_hours(settings)
    return f"{AUDIT_MINUTE} * * * *" if hours == 1 else f"{AUDIT_MINUTE} */{hours} * * *"


def audit_retry(settings: StackSettings) -> RetryConfig:
    """Retries that outlive a crashed attempt's lease, as the timing rules demand of every job,
    and arrive before the next audit run."""
    backoff = _first_backoff(settings)
    return RetryConfig(
        retry_count=5,
        max_retry_duration_seconds=0.0,
        min_backoff_seconds=backoff,
        max_backoff_seconds=16 * backoff,
        max_doublings=3,
    )


def audit_job(settings: StackSettings) -> JobSettings:
    """The audit's own scheduled job: hourly, through the same exactly-once handler."""
    deadline = min(
        max(settings.function_timeout_seconds, MIN_ATTEMPT_DEADLINE_SECONDS), MAX_ATTEMPT_DEADLINE_SECONDS
    )
    return JobSettings(
        name=AUDIT_JOB_NAME,
        schedule=audit_schedule(settings),
        time_zone="Etc/UTC",
        attempt_deadline_seconds=deadline,
        retry=audit_retry(settings),
        handler=AUDIT_HANDLER,
        # Two audit runs at once (a forced one beside the hourly one) would both continue from
        # where the last one stopped and judge the same runs twice: the second waits.
        overlap=OverlapPolicy.WAIT,
    )


def with_audit_job(settings: StackSettings) -> StackSettings:
    """`settings` plus the audit job, so the stack schedules it like any other job (and its
    handler lands in the job table); `settings` as they are with `missedRunAudit: false`.
    Applying it twice changes nothing; a configured job that took the audit's name is refused
    (the settings refuse it first, naming the key)."""
    if not settings.missed_run_audit:
        return settings
    audit = audit_job(settings)
    existing = [job for job in settings.jobs if job.name == AUDIT_JOB_NAME]
    if existing == [audit]:
        return settings
    if existing:
        raise ValueError(f"job name {AUDIT_JOB_NAME!r} is reserved for the stack's missed-run audit")
    return dataclasses.replace(settings, jobs=(*settings.jobs, audit))


def audited_jobs(
    settings: StackSettings,
    deployed_at: Mapping[str, datetime] | None = None,
    pause_changed_at: Mapping[str, datetime] | None = None,
) -> tuple[AuditedJob, ...]:
    """Every job of `settings` as the audit sees it (the audit job too, when present: a
    missed audit run is reported by the next one), named by its run key (run_key_id): the
    audit computes run ids and keeps its history by that name, so a job renamed with its
    runKey kept is judged and caught up as one job, through the renamed Scheduler job's
    headers (its catch-up delivery). `deployed_at` (by run key name, JobSettings.key_name: the
    config name unless runKey is set) keeps the audit from reporting runs scheduled before a
    job existed; `pause_changed_at` (by the same name) says when a job's `paused` key last
    changed, so that the audit knows when its pause began or ended."""
    deployed_at = deployed_at or {}
    pause_changed_at = pause_changed_at or {}
    return tuple(
        AuditedJob(
            name=settings.run_key_id(job),
            schedule=job.schedule,
            time_zone=job.time_zone,
            retry_window_seconds=retry_window_seconds(settings, job),
            not_before=deployed_at.get(job.key_name),
            paused=job.paused,
            pause_changed_at=pause_changed_at.get(job.key_name),
            catchup=job.catchup,
            delivery=catchup_delivery(settings, job) if job.catchup is not None else None,
        )
        for job in settings.jobs
    )


def audit_config(
    settings: StackSettings,
    deployed_at: Mapping[str, datetime] | None = None,
    redelivery: Redelivery | tuple[Redelivery, ...] | None = None,
    pause_changed_at: Mapping[str, datetime] | None = None,
) -> AuditConfig:
    """What the audit job reads (the job table's `audit`), for `settings` with the audit
    job already added. Without `deployed_at`, the first audit after a job is created reports
    the runs of the hour before it as missed, once. `redelivery` says where catch-up
    deliveries go (infra/plan/catchup.py: one per region of a two-region stack); a stack with
    a catch-up policy needs one."""
    redeliveries = (redelivery,) if isinstance(redelivery, Redelivery) else redelivery or ()
    return AuditConfig(
        jobs=audited_jobs(settings, deployed_at, pause_changed_at),
        interval_seconds=audit_interval_seconds(settings),
        redeliveries=redeliveries,
    )
