"""The missed-run audit run in this process on a clock the test chooses, and what tests read
from an audit: its output, its log lines, the runs its span had to judge.

The audit's horizon is its own claim's commit time (`RunContext.claimed_at`), so an audit
delivered through the served function judges up to now. A test that needs a horizon of its
own (yesterday's 12:05, a second audit an hour later) runs `exactly_once.audit.run.run_audit` here
instead, on the same ledger the served function writes (the emulator), with the same audit
configuration the stack ships in the function's job table, and a real sender (loopback POSTs
to the served function, or Cloud Tasks tasks on a fake): the run ids, records and deliveries are the
stack's; only the audit's clock and its previous run are the test's.

An audit run here leaves no record and no job status: the next audit is told where this one
stopped through `previous` (what `RunContext.previous()` would read from the job's status),
and a later audit judges this audit's own run as it finds it in the ledger (missed, unless
the test delivered that run through the function too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.cloud import firestore

from exactly_once.audit.config import AuditConfig, AuditedJob, Redelivery
from exactly_once.audit.missed_runs import RecordReader, runs_whose_window_closed
from exactly_once.audit.redelivery import Sender, sender_for
from exactly_once.audit.schedule import fires
from exactly_once.delivery.scheduler_request import format_rfc3339, parse_rfc3339
from infra.plan.audit_job import audit_config
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.stack import StackSettings
from tests.support.audit_runs import AuditOutcome, ledger_reader, refuse_to_send, run_in_process


@dataclass(frozen=True)
class StackAudit:
    """The stack's audit job, run in this process on the test's clock against the ledger in
    `db` (the emulator the served function writes), with the audit configuration the stack writes."""

    settings: StackSettings
    config: AuditConfig
    read_records: RecordReader
    send: Sender

    @property
    def job_name(self) -> str:
        return self.settings.scheduler_job_id(AUDIT_JOB_NAME)

    def run(self, when: datetime, *, previous: AuditOutcome | None = None) -> AuditOutcome:
        """The audit run scheduled at `when`, its horizon `when`; `previous` is the last
        completed audit (None: this is the stack's first)."""
        return run_in_process(
            self.config,
            self.read_records,
            self.send,
            project=self.settings.project,
            location=self.settings.region,
            job_name=self.job_name,
            when=when,
            lease=timedelta(seconds=self.settings.lease_seconds),
            retention=timedelta(seconds=self.settings.retention_seconds),
            previous=previous,
        )


def stack_audit(
    settings: StackSettings,
    db: firestore.Client,
    *,
    redelivery: Redelivery | None = None,
    sender_env: Mapping[str, str] | None = None,
    deployed_at: Mapping[str, datetime] | None = None,
    pause_changed_at: Mapping[str, datetime] | None = None,
) -> StackAudit:
    """The audit of `settings` (with the audit job added) on `db`, configured as
    `audit_config` configures the function's. `redelivery` is where its catch-up
    deliveries go, sent by the real sender (`sender_env` holds what it reads, e.g. the Cloud
    Tasks endpoint); without one, any catch-up delivery fails the test."""
    config = audit_config(settings, deployed_at, redelivery, pause_changed_at)
    send = sender_for(redelivery, sender_env or {}) if redelivery is not None else refuse_to_send
    return StackAudit(
        settings,
        config,
        ledger_reader(db, settings.runs_collection),
        send,
    )


# ---- What an audit's span holds, for audits on the real clock -------------------------------


def judged_span(output: Mapping[str, Any]) -> tuple[datetime, datetime]:
    """(judged_from, judged_until) of an audit's output."""
    return parse_rfc3339(output["judged_from"]), parse_rfc3339(output["judged_until"])


def windows_closed_in(jobs: Iterable[AuditedJob], since: datetime, until: datetime) -> set[tuple[str, str]]:
    """(job, schedule time) of every run whose retry window closed in (since, until]: the runs
    an audit of that span judges."""
    return {
        (job.name, format_rfc3339(fire.instant))
        for job in jobs
        for fire in runs_whose_window_closed(job, after=since, up_to=until)
    }


def latest_fire(
    job: AuditedJob, at_or_before: datetime, *, lookback: timedelta = timedelta(days=1)
) -> datetime:
    """The job's latest fire time at or before `at_or_before` (within `lookback`)."""
    (latest,) = fires(job.schedule, job.time_zone, at_or_before - lookback, at_or_before, newest=1)
    return latest.instant


def closed_fires(job: AuditedJob, now: datetime, count: int) -> list[datetime]:
    """The job's `count` latest fire times whose retry window closed by `now`, oldest first."""
    closed_by = now - timedelta(seconds=job.retry_window_seconds)
    return [
        fire.instant
        for fire in fires(job.schedule, job.time_zone, closed_by - timedelta(days=1), closed_by, newest=count)
    ]


def audited(config: AuditConfig, name: str) -> AuditedJob:
    """The job named `name` (deployed name) in `config`."""
    (job,) = [job for job in config.jobs if job.name == name]
    return job
