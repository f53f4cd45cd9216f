"""The scheduled missed-run audit: one `missed_run` log line per run that never completed.

It runs as an ordinary job of the stack (hourly, through the same exactly-once handler, with
the overlap policy `wait`, so two audits never judge at once), and each audit run happens once
however often Cloud Scheduler delivers it.

What one audit run does (its clock, the span it judges, pauses, catch-up, a job it cannot
judge) is exactly_once/audit/run.py's; this module reads the stack's configuration and serves it.

Each audit run then follows the downstream work of every proxy run still recorded running
(exactly_once/audit/downstream.py).

The job table's `audit` (JSON, written by the stack): {"interval_seconds": 3600, "jobs": [{"name", "schedule",
"time_zone", "retry_window_seconds", "not_before"?, "paused"?, "pause_changed_at"?,
"catchup"?, "delivery"?}, ...], "redelivery"?: {"url", "queue"?, "invoker"?} or a list of them,
each with its "region"}. With a list, SERVING_REGION (set by a two-region stack) picks this
function's. RUNS_COLLECTION, FIRESTORE_DATABASE, LEASE_SECONDS and RETENTION_SECONDS are the
function's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from exactly_once import RunContext, firestore_client
from exactly_once.audit.config import (
    AUDIT_TABLE_KEY,
    REGION_ENV,
    AuditConfig,
    AuditedJob,
    AuditError,
    Redelivery,
)
from exactly_once.audit.downstream import follow_running_work
from exactly_once.audit.reads import database_name, firestore_api, firestore_reader
from exactly_once.audit.redelivery import RedeliveryError, check_redelivery, sender_for
from exactly_once.audit.run import run_audit
from exactly_once.config import JOB_TABLE_ENV, ConfigError, FunctionConfig, JobTableError
from exactly_once.once import OncePerInstance


def audit_config(function: FunctionConfig, env: Mapping[str, str]) -> AuditConfig:
    """Read at start-up: a job table without a valid `audit` stops the instance, naming the
    key. A job's schedule or zone is checked when that job is judged, so one bad job cannot
    stop the instance (which serves every job of the stack) nor the audit of the others."""
    source = env.get(JOB_TABLE_ENV, "").strip()
    if function.audit is None:
        raise ConfigError(
            JOB_TABLE_ENV, f"the job table must hold `{AUDIT_TABLE_KEY}` for the missed-run audit job"
        )
    try:
        config = AuditConfig.from_raw(function.audit)
    except AuditError as error:
        raise JobTableError(source, AUDIT_TABLE_KEY, str(error)) from None
    function_redelivery(config, env)
    return config


def function_redelivery(config: AuditConfig, env: Mapping[str, str]) -> Redelivery | None:
    """Read at start-up: where this function's catch-up deliveries go. A per-region
    redelivery that does not name this function's region (REGION_ENV) stops the instance,
    naming the variable and the regions the table names."""
    try:
        redelivery = config.redelivery_for(env.get(REGION_ENV, "").strip() or None)
    except AuditError as error:
        raise ConfigError(REGION_ENV, f"the job table's {AUDIT_TABLE_KEY}.{error}") from None
    if redelivery is not None:
        check_redelivery(redelivery)
    return redelivery


# Read when the router imports this module, i.e. once at the instance's start-up, from the
# environment as it is then (not the decorator's copy, read when exactly_once was first
# imported: a process that sets JOB_TABLE in between, a test, sees its own).
FUNCTION = FunctionConfig.from_env(os.environ)
CONFIG = audit_config(FUNCTION, os.environ)
REDELIVERY = function_redelivery(CONFIG, os.environ)
# The generated client the audit reads run records with (audit/reads.py), built on first use.
_records_api = OncePerInstance(firestore_api)
# Built on first use (a Cloud Tasks client for a deployed stack): an audit with nothing to
# catch up never builds one.
_sender = OncePerInstance(lambda: sender_for(REDELIVERY, os.environ) if REDELIVERY is not None else None)


def audit_missed_runs(context: RunContext) -> dict[str, Any]:
    """The job handler (`jobs.missed_runs:audit_missed_runs`); its output, stored in its run
    record, says what it judged and lists the runs it delivered again."""
    database = database_name(firestore_client().project, FUNCTION.database)
    read = firestore_reader(_records_api(), database, FUNCTION.runs_collection)
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
        raise RedeliveryError("the job table's audit names no redelivery")
    return send(job, schedule_time)
