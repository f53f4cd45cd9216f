"""The scheduled missed-run audit: one `missed_run` log line per run that never completed.

It runs as an ordinary job of the stack (hourly, through the same exactly-once handler), so
each audit run happens once however often Cloud Scheduler delivers it, and it judges the runs
whose retry window closed in the interval that ends at its own schedule time. Consecutive
audit runs therefore cover time back to back: every run is judged once, and a retried or late
audit reaches the same verdict, because nothing in it depends on the instance's clock.

The stack's missed-run alert counts the lines; the ledger is only read for them. A paused
job's runs without a record are counted as paused, never missed.

A job with a catch-up policy has its missed runs inside its window delivered again
(exactly_once/audit/catchup.py picks them, audit/redelivery.py sends them): each is one
`catchup_delivery` line instead of a `missed_run` line, and the audit run's output (stored in
its run record, which `ops audit` reads) lists them.

Each audit run then follows the downstream work of every proxy run still recorded running
(exactly_once/audit/downstream.py): it asks each execution's API, records what changed on the
run, and logs a `downstream_failed` line for work that failed, which the stack alerts on.

AUDIT_JOBS (JSON, set by the stack): {"interval_seconds": 3600, "jobs": [{"name", "schedule",
"time_zone", "retry_window_seconds", "not_before"?, "paused"?, "catchup"?, "delivery"?}, ...],
"redelivery"?: {"url", "queue"?, "invoker"?}}. RUNS_COLLECTION and FIRESTORE_DATABASE are
the function's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from exactly_once import RunContext, firestore_client, log_fields, structured_log
from exactly_once.audit.catchup import catchup_candidates
from exactly_once.audit.config import AUDIT_JOBS_ENV, AuditConfig, AuditedJob, AuditError
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
from exactly_once.audit.redelivery import RedeliveryError, Sender, check_redelivery, sender_for
from exactly_once.config import ConfigError, FunctionConfig
from exactly_once.delivery.scheduler_request import format_rfc3339
from exactly_once.once import OncePerInstance


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
    if config.redelivery is not None:
        check_redelivery(config.redelivery)
    return config


CONFIG = config_from_env(os.environ)
RUNS_COLLECTION = FunctionConfig.from_env(os.environ).runs_collection
# Built on first use (a Cloud Tasks client for a deployed stack): an audit with nothing to
# catch up never builds one.
_sender = OncePerInstance(
    lambda: sender_for(CONFIG.redelivery, os.environ) if CONFIG.redelivery is not None else None
)


def audit_missed_runs(context: RunContext) -> dict[str, Any]:
    """The job handler (`jobs.missed_runs:audit_missed_runs`); its output, stored in its run
    record, lists the runs it delivered again."""
    read = firestore_reader(firestore_client(), RUNS_COLLECTION)
    caught_up = catch_up(context, CONFIG, read, _lazy_send, sys.stdout)
    judged = report_missed_runs(
        context, CONFIG, read, sys.stdout, caught_up={run["run_id"] for run in caught_up}
    )
    followed = follow_running_work(
        firestore_client(),
        RUNS_COLLECTION,
        seconds_left=context.seconds_left,
        audit_run_id=context.run_id,
        stream=sys.stdout,
    )
    return {
        "judged": len(judged),
        "missed": sum(run.state is RunState.MISSED for run in judged),
        "caught_up": caught_up,
        "downstream": dict(followed),
    }


def _lazy_send(job: AuditedJob, schedule_time: datetime) -> str:
    send = _sender()
    if send is None:
        raise RedeliveryError("AUDIT_JOBS names no redelivery")
    return send(job, schedule_time)


def catch_up(
    context: RunContext, config: AuditConfig, read_records: RecordReader, send: Sender, stream: TextIO
) -> list[dict[str, str]]:
    """Deliver again each run the jobs' catch-up policies pick, oldest first; one
    `catchup_delivery` line each. Returns the runs handed over (job, schedule time, run id, how).
    A run whose hand-over failed is left to the next audit, and logged as such."""
    jobs = {job.name: job for job in config.jobs}
    # A scheduled audit runs after its schedule time. A forced one (`run-now`, `smoke`) carries
    # the next scheduled time, still to come: no run is judged over before it really is.
    now = min(context.schedule_time, datetime.now(UTC))
    runs = catchup_candidates(
        config.jobs,
        project=context.project,
        location=context.location,
        now=now,
        read_records=read_records,
        target=stack_target(read_records, [context.run_id]),
    )
    delivered: list[dict[str, str]] = []
    for run in runs:
        stamp = format_rfc3339(run.schedule_time)
        fields: dict[str, object] = {
            log_fields.EVENT: log_fields.CATCHUP_DELIVERY,
            log_fields.JOB: run.job,
            log_fields.SCHEDULE_TIME: stamp,
            log_fields.RUN_ID: run.run_id,
            "audit_run_id": context.run_id,
        }
        try:
            via = send(jobs[run.job], run.schedule_time)
        except RedeliveryError as error:
            fields["delivered"] = False
            structured_log.emit(
                "ERROR",
                f"{log_fields.CATCHUP_DELIVERY}: job {run.job} scheduled at {stamp} not handed over: "
                f"{error}; the next audit tries again while the run is inside its catch-up window",
                fields,
                stream,
            )
            continue
        fields["delivered"], fields["via"] = True, via
        structured_log.emit(
            "WARNING",
            f"{log_fields.CATCHUP_DELIVERY}: job {run.job} scheduled at {stamp} was never delivered; "
            f"delivered again ({via})",
            fields,
            stream,
        )
        delivered.append({"job": run.job, "schedule_time": stamp, "run_id": run.run_id, "via": via})
    return delivered


def report_missed_runs(
    context: RunContext,
    config: AuditConfig,
    read_records: RecordReader,
    stream: TextIO,
    *,
    caught_up: frozenset[str] | set[str] = frozenset(),
) -> list[ExpectedRun]:
    """Judge the runs whose window closed in (schedule_time - interval, schedule_time] and log
    each missed one, but those `caught_up` (run ids this audit delivered again, each logged as
    a catch-up delivery); returns what was judged.

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
    missed = [run for run in judged if run.state is RunState.MISSED and run.run_id not in caught_up]
    paused = [run for run in judged if run.state is RunState.PAUSED]
    skipped_late = [run for run in judged if run.state is RunState.SKIPPED_LATE]
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
        f"{log_fields.AUDIT_SUMMARY}: {len(missed)} of {len(judged)} runs missed, {len(paused)} paused, "
        f"{len(skipped_late)} skipped late, {len(caught_up)} delivered again "
        f"(retry windows closed in ({format_rfc3339(after)}, {format_rfc3339(up_to)}])",
        {
            log_fields.EVENT: log_fields.AUDIT_SUMMARY,
            "judged": len(judged),
            "missed": len(missed),
            "paused": len(paused),
            "skipped_late": len(skipped_late),
            "caught_up": len(caught_up),
            "audit_run_id": context.run_id,
        },
        stream,
    )
    return judged
