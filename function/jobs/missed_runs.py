"""The scheduled missed-run audit: one `missed_run` log line per run that never completed.

It runs as an ordinary job of the stack (hourly, through the same exactly-once handler), so
each audit run happens once however often Cloud Scheduler delivers it, and it judges the runs
whose retry window closed in the interval that ends at its own schedule time. Consecutive
audit runs therefore cover time back to back: every run is judged once, and a retried or late
audit reaches the same verdict, because nothing in it depends on the instance's clock.

The stack's missed-run alert counts the lines; the ledger is only read for them.

Each audit run then follows the downstream work of every proxy run still recorded running
(exactly_once/audit/downstream.py): it asks each execution's API, records what changed on the
run, and logs a `downstream_failed` line for work that failed, which the stack alerts on.

AUDIT_JOBS (JSON, set by the stack): {"interval_seconds": 3600, "jobs": [{"name", "schedule",
"time_zone", "retry_window_seconds", "not_before"?}, ...]}. RUNS_COLLECTION and
FIRESTORE_DATABASE are the function's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import TextIO

from exactly_once import RunContext, firestore_client, log_fields, structured_log
from exactly_once.audit.config import AUDIT_JOBS_ENV, AuditConfig, AuditError
from exactly_once.audit.downstream import follow_running_work
from exactly_once.audit.missed_runs import (
    ExpectedRun,
    RecordReader,
    RunState,
    checked_schedule,
    judge_runs,
    runs_whose_window_closed,
    stack_target,
)
from exactly_once.audit.reads import firestore_reader
from exactly_once.config import ConfigError, FunctionConfig
from exactly_once.delivery.scheduler_request import format_rfc3339


def config_from_env(env: Mapping[str, str]) -> AuditConfig:
    """Read at start-up: a missing or malformed AUDIT_JOBS stops the instance, naming it."""
    raw = env.get(AUDIT_JOBS_ENV, "").strip()
    if not raw:
        raise ConfigError(AUDIT_JOBS_ENV, "must be set for the missed-run audit job")
    try:
        config = AuditConfig.from_json(raw)
        for job in config.jobs:
            checked_schedule(job.schedule, job.time_zone)
    except AuditError as error:
        raise ConfigError(AUDIT_JOBS_ENV, str(error)) from None
    return config


CONFIG = config_from_env(os.environ)
RUNS_COLLECTION = FunctionConfig.from_env(os.environ).runs_collection


def audit_missed_runs(context: RunContext) -> None:
    """The job handler (`jobs.missed_runs:audit_missed_runs`)."""
    report_missed_runs(
        context,
        CONFIG,
        firestore_reader(firestore_client(), RUNS_COLLECTION),
        sys.stdout,
    )
    follow_running_work(
        firestore_client(),
        RUNS_COLLECTION,
        seconds_left=context.seconds_left,
        audit_run_id=context.run_id,
        stream=sys.stdout,
    )


def report_missed_runs(
    context: RunContext, config: AuditConfig, read_records: RecordReader, stream: TextIO
) -> list[ExpectedRun]:
    """Judge the runs whose window closed in (schedule_time - interval, schedule_time] and log
    each missed one; returns what was judged.

    The target on this audit run's own record is the stack's: the function that claimed it
    runs every job of the stack, so a run recorded by any other target is missed."""
    up_to = context.schedule_time
    after = up_to - timedelta(seconds=config.interval_seconds)
    due = runs_whose_window_closed(config.jobs, after=after, up_to=up_to)
    judged = judge_runs(
        due,
        project=context.project,
        location=context.location,
        now=up_to,
        read_records=read_records,
        target=stack_target(read_records, [context.run_id]),
    )
    missed = [run for run in judged if run.state is RunState.MISSED]
    for run in missed:
        fields: dict[str, object] = {
            log_fields.EVENT: log_fields.MISSED_RUN,
            log_fields.JOB: run.job,
            log_fields.SCHEDULE_TIME: format_rfc3339(run.schedule_time),
            log_fields.RUN_ID: run.run_id,
            "retry_window_closed": format_rfc3339(run.window_closes),
            "claimed": run.record is not None,
            "audit_run_id": context.run_id,
        }
        if run.other_target is not None:
            fields["recorded_target"] = run.other_target
        structured_log.emit(
            "ERROR",
            f"{log_fields.MISSED_RUN}: job {run.job} scheduled at {format_rfc3339(run.schedule_time)} "
            f"never completed: {run.detail}",
            fields,
            stream,
        )
    structured_log.emit(
        "WARNING" if missed else "INFO",
        f"{log_fields.AUDIT_SUMMARY}: {len(missed)} of {len(judged)} runs missed "
        f"(retry windows closed in ({format_rfc3339(after)}, {format_rfc3339(up_to)}])",
        {
            log_fields.EVENT: log_fields.AUDIT_SUMMARY,
            "judged": len(judged),
            "missed": len(missed),
            "audit_run_id": context.run_id,
        },
        stream,
    )
    return judged
