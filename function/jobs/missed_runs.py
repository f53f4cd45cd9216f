"""The scheduled missed-run audit: one `missed_run` log line per run that never completed.

It runs as an ordinary job of the stack (hourly, through the same exactly-once handler, with
the overlap policy `wait`, so two audits never judge at once), and each audit run happens once
however often Cloud Scheduler delivers it.

What one audit run does (its clock, the span it judges, pauses, catch-up, a job it cannot
judge) is exactly_once/audit/run.py's; this module reads the stack's configuration and serves it.

Each audit run then follows the downstream work of every proxy run still recorded running
(exactly_once/audit/downstream.py).

AUDIT_JOBS (JSON, set by the stack): {"interval_seconds": 3600, "jobs": [{"name", "schedule",
"time_zone", "retry_window_seconds", "not_before"?, "paused"?, "pause_changed_at"?,
"catchup"?, "delivery"?}, ...], "redelivery"?: {"url", "queue"?, "invoker"?}}.
RUNS_COLLECTION, FIRESTORE_DATABASE, LEASE_SECONDS and RETENTION_SECONDS are the function's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from exactly_once import RunContext, firestore_client
from exactly_once.audit.config import AUDIT_JOBS_ENV, AuditConfig, AuditedJob, AuditError
from exactly_once.audit.downstream import follow_running_work
from exactly_once.audit.reads import firestore_reader
from exactly_once.audit.redelivery import RedeliveryError, check_redelivery, sender_for
from exactly_once.audit.run import run_audit
from exactly_once.config import ConfigError, FunctionConfig
from exactly_once.once import OncePerInstance


def config_from_env(env: Mapping[str, str]) -> AuditConfig:
    """Read at start-up: a missing or malformed AUDIT_JOBS stops the instance, naming it. A
    job's schedule or zone is checked when that job is judged, so one bad job cannot stop the
    instance (which serves every job of the stack) nor the audit of the others."""
    raw = env.get(AUDIT_JOBS_ENV, "").strip()
    if not raw:
        raise ConfigError(AUDIT_JOBS_ENV, "must be set for the missed-run audit job")
    try:
        config = AuditConfig.from_json(raw)
    except AuditError as error:
        raise ConfigError(AUDIT_JOBS_ENV, str(error)) from None
    if config.redelivery is not None:
        check_redelivery(config.redelivery)
    return config


CONFIG = config_from_env(os.environ)
FUNCTION = FunctionConfig.from_env(os.environ)
# Built on first use (a Cloud Tasks client for a deployed stack): an audit with nothing to
# catch up never builds one.
_sender = OncePerInstance(
    lambda: sender_for(CONFIG.redelivery, os.environ) if CONFIG.redelivery is not None else None
)


def audit_missed_runs(context: RunContext) -> dict[str, Any]:
    """The job handler (`jobs.missed_runs:audit_missed_runs`); its output, stored in its run
    record, says what it judged and lists the runs it delivered again."""
    read = firestore_reader(firestore_client(), FUNCTION.runs_collection)
    output = run_audit(
        context,
        CONFIG,
        read,
        _lazy_send,
        sys.stdout,
        lease=timedelta(seconds=FUNCTION.lease_seconds),
        retention=timedelta(seconds=FUNCTION.retention_seconds),
    )
    followed = follow_running_work(
        firestore_client(),
        FUNCTION.runs_collection,
        seconds_left=context.seconds_left,
        audit_run_id=context.run_id,
        stream=sys.stdout,
    )
    return {**output, "downstream": dict(followed)}


def _lazy_send(job: AuditedJob, schedule_time: datetime) -> str:
    send = _sender()
    if send is None:
        raise RedeliveryError("AUDIT_JOBS names no redelivery")
    return send(job, schedule_time)
