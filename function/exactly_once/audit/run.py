"""One run of the missed-run audit: catch up, then judge, on Firestore's clock, from where the
last completed audit stopped.

The audit's horizon is its own claim's commit time (`RunContext.claimed_at`): never the
ScheduleTime it carries (a forced run carries the next hour's), never the instance's clock
(which may be hours off). It judges the runs whose retry window closed between where the last
completed audit stopped (kept in that audit's output, read through `RunContext.previous()`)
and its horizon, so every run is judged once, by the first audit after its last possible
delivery, however many audit runs an outage cost. How far back it looks is bounded by the
records' retention (older runs' records may be gone): the output says where it started and
what it did not judge. The pauses it knows ride in the output too (audit/pauses.py).

One audit run reads for at most a share of the time its attempt has left (audit/budget.py), so
it completes whatever the backlog and however slow Firestore is: the runs of its span are taken
in the order their windows close, across all jobs, in pages of ids, and when the next page would
not end in time the span is cut after the last instant read. The output's `judged_until` is the
cut, so the next audit continues from it exactly as after an outage, and `left_for_next` says
what this one left.

One job the audit cannot judge (a schedule that never fires, a zone it does not know) is one
`audit_job_error` line; every other job is judged all the same.

The stack's job (function/jobs/missed_runs.py) reads its configuration and serves this.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TextIO

from exactly_once import structured_log
from exactly_once.audit.budget import ReadDeadline
from exactly_once.audit.catchup import catch_up
from exactly_once.audit.config import AuditConfig, AuditError
from exactly_once.audit.judging import report_missed_runs
from exactly_once.audit.missed_runs import (
    RecordReader,
    stack_target,
)
from exactly_once.audit.pauses import history_from_json, history_to_json, observe
from exactly_once.audit.redelivery import Sender
from exactly_once.audit.state import AuditRun, LastAudit, Span
from exactly_once.context import RunContext
from exactly_once.errors import TerminalJobError
from exactly_once.ledger.lifecycle import Verdict
from exactly_once.run_key import format_rfc3339, parse_rfc3339


def run_audit(
    context: RunContext,
    config: AuditConfig,
    read_records: RecordReader,
    send: Sender,
    stream: TextIO,
    *,
    lease: timedelta,
    retention: timedelta,
    max_runs: int | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Catch up, then judge, on the span from where the last completed audit stopped to this
    run's claim (Firestore's clock), as much of it as the attempt's time allows (read on
    `monotonic`, the clock of `context.ends_at`) and at most `max_runs` runs; the output is what
    the next audit continues from."""
    if context.claimed_at is None:
        raise TerminalJobError("the audit needs its claim's commit time (RunContext.claimed_at) as its clock")
    horizon = context.claimed_at
    last = last_audit(context, stream)
    span = judged_span(config, horizon, last.judged_until, retention)
    pauses = observe(
        last.pauses or {},
        config.jobs,
        horizon=horizon,
        previous_horizon=last.judged_until,
        keep_since=horizon - retention,
    )
    deadline = ReadDeadline.for_attempt(context.ends_at, monotonic)
    run = AuditRun(
        context,
        config,
        read_records,
        stream,
        lease,
        span,
        pauses,
        stack_target(deadline.reader(read_records), [context.run_id]),
        {},
        deadline,
        max_runs,
    )
    caught_up = catch_up(run, send)
    delivered = {entry["run_id"] for entry in caught_up}
    judged = report_missed_runs(run, caught_up=delivered)
    span = run.span
    output: dict[str, Any] = {
        "judged_from": format_rfc3339(span.since),
        "judged_until": format_rfc3339(span.until),
        "judged": len(judged),
        "missed": sum(entry.state is Verdict.MISSED and entry.run_id not in delivered for entry in judged),
        "paused": sum(entry.state is Verdict.PAUSED for entry in judged),
        "caught_up": caught_up,
        "pauses": history_to_json(pauses),
    }
    if span.not_judged is not None:
        output["not_judged_before"] = format_rfc3339(span.not_judged)
    if span.horizon is not None:
        output["left_for_next"] = {"until": format_rfc3339(span.horizon), "why": run.why_cut()}
    if run.errors:
        output["errors"] = dict(sorted(run.errors.items()))
    return output


def last_audit(context: RunContext, stream: TextIO) -> LastAudit:
    """What the last completed audit's output says (one read, of the job's status). An output
    this audit cannot read counts as none: the span starts an interval back, as on a first run."""
    previous = context.previous()
    output = previous.output if previous is not None else None
    if not isinstance(output, dict):
        return LastAudit()
    try:
        until = output.get("judged_until")
        judged_until = parse_rfc3339(until) if isinstance(until, str) else None
        return LastAudit(judged_until, history_from_json(output.get("pauses")))
    except (AuditError, ValueError) as error:
        structured_log.emit(
            "WARNING",
            f"the last audit's output could not be read ({error}): judging from one interval back",
            {"audit_run_id": context.run_id, "previous_run_id": previous.run_id if previous else None},
            stream,
        )
        return LastAudit()


def judged_span(
    config: AuditConfig, horizon: datetime, last_until: datetime | None, retention: timedelta
) -> Span:
    """From where the last audit stopped (one interval back on a first run) to `horizon`, but
    never further back than the records' retention less the longest retry window allows: a run
    older than that may have lost its record to the TTL, and would be reported missed for it."""
    interval = timedelta(seconds=config.interval_seconds)
    longest_window = max((job.retry_window_seconds for job in config.jobs), default=0.0)
    lookback = max(interval, retention - timedelta(seconds=longest_window))
    since = last_until if last_until is not None else horizon - interval
    oldest = horizon - lookback
    if since < oldest:
        return Span(oldest, horizon, not_judged=oldest)
    return Span(min(since, horizon), horizon)
