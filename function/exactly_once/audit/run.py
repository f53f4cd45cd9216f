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

One audit run judges at most a budget of runs (`runs_budget`, from the time its attempt has
left), so it completes whatever the backlog: the runs of its span are taken in the order their
windows close, across all jobs, and when the next instant's runs would exceed the budget the
span is cut there. The output's `judged_until` is the cut, so the next audit continues from it
exactly as after an outage, and `left_for_next` says what this one left. The runs taken are
read together, in full pages of ids (audit/reads.py), then judged.

One job the audit cannot judge (a schedule that never fires, a zone it does not know) is one
`audit_job_error` line; every other job is judged all the same.

The stack's job (function/jobs/missed_runs.py) reads its configuration and serves this.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO, TypeVar

from google.api_core import exceptions as google_exceptions

from exactly_once import log_fields, structured_log
from exactly_once.audit.catchup import first_to_deliver, job_candidates
from exactly_once.audit.config import AuditConfig, AuditedJob, AuditError
from exactly_once.audit.missed_runs import (
    ExpectedRun,
    RecordReader,
    closing_after,
    judge_runs,
    stack_target,
    window_closes,
)
from exactly_once.audit.pauses import PauseHistory, history_from_json, history_to_json, observe
from exactly_once.audit.redelivery import RedeliveryError, Sender
from exactly_once.audit.schedule import FireTime
from exactly_once.context import RunContext
from exactly_once.errors import TerminalJobError, error_text
from exactly_once.ledger.lifecycle import Verdict
from exactly_once.run_key import format_rfc3339, parse_rfc3339

T = TypeVar("T")


# How many runs an audit judges per second its attempt has left. Walking a run's schedule,
# reading its projected record and judging it costs 0.38 to 0.46 ms of CPU on a full core
# (`make bench` case 7, idle and loaded), so up to 2.8 ms on a deployed function of the default size (a sixth
# of a vCPU): about 355 runs a second. The audit judges for at most half of its attempt, so the
# rest is left to catch-up, the downstream follow-up and a Firestore slower than usual.
JUDGED_RUNS_PER_SECOND = 175
# However little time is left, an audit judges at least this much, and always the runs of its
# first closing instant: it never completes without moving on.
MIN_RUNS_BUDGET = 1000


def runs_budget(seconds_left: float) -> int | None:
    """How many runs one audit judges, from the time its attempt has left (None: no limit, an
    attempt without a deadline)."""
    if math.isinf(seconds_left):
        return None
    return max(MIN_RUNS_BUDGET, int(seconds_left * JUDGED_RUNS_PER_SECOND))


@dataclass(frozen=True)
class Span:
    """The retry windows one audit judges: those that closed in (since, until]. `not_judged`
    is where a longer span was cut at the records' retention (None when it was not);
    `horizon`, when the span was cut at the audit's budget, is where it would have ended (the
    runs whose windows closed in (until, horizon] are left for the next audit)."""

    since: datetime
    until: datetime
    not_judged: datetime | None = None
    horizon: datetime | None = None


@dataclass(frozen=True)
class LastAudit:
    """What the last completed audit left for this one: where it stopped, and the pauses."""

    judged_until: datetime | None = None
    pauses: PauseHistory | None = None


@dataclass
class AuditRun:
    """One audit run's clock, span, knowledge and findings, shared by its steps."""

    context: RunContext
    config: AuditConfig
    read_records: RecordReader
    stream: TextIO
    lease: timedelta
    span: Span
    pauses: PauseHistory
    target: str | None
    errors: dict[str, str]

    budget: int | None = None

    @property
    def horizon(self) -> datetime:
        """The audit's "now": its claim's commit time, whether or not its span was cut."""
        return self.span.horizon or self.span.until

    def per_job(self, step: Callable[[AuditedJob], T], jobs: Iterable[AuditedJob]) -> list[T]:
        """`step` for each job; a job it cannot judge is logged and left out, never the rest.
        Firestore failing is not a job's fault: the audit fails, and is retried, whole."""
        done = []
        for job in jobs:
            try:
                done.append(step(job))
            except google_exceptions.GoogleAPIError:
                raise
            except Exception as error:  # AuditError, or anything croniter raises on a schedule
                self.job_error(job, error)
        return done

    def job_error(self, job: AuditedJob, error: Exception) -> None:
        reason = error_text(str(error) if isinstance(error, AuditError) else repr(error))
        self.errors[job.name] = reason
        structured_log.emit(
            "ERROR",
            f"{log_fields.AUDIT_JOB_ERROR}: job {job.name} (schedule {job.schedule!r} in {job.time_zone}) "
            f"was not judged: {reason}; the other jobs were",
            {
                log_fields.EVENT: log_fields.AUDIT_JOB_ERROR,
                log_fields.JOB: job.name,
                "error": reason,
                "audit_run_id": self.context.run_id,
            },
            self.stream,
        )


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
) -> dict[str, Any]:
    """Catch up, then judge, on the span from where the last completed audit stopped to this
    run's claim (Firestore's clock), at most `max_runs` runs of it (by default the budget of
    the time the attempt has left); the output is what the next audit continues from."""
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
    run = AuditRun(
        context,
        config,
        read_records,
        stream,
        lease,
        span,
        pauses,
        stack_target(read_records, [context.run_id]),
        {},
        max_runs if max_runs is not None else runs_budget(context.seconds_left()),
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
        output["left_for_next"] = {"until": format_rfc3339(span.horizon), "budget": run.budget}
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


def catch_up(run: AuditRun, send: Sender) -> list[dict[str, str]]:
    """Deliver again each run the jobs' catch-up policies pick, oldest first; one
    `catchup_delivery` line each. Returns the runs handed over (job, schedule time, run id, how).
    A run whose hand-over failed is left to the next audit, and logged as such."""
    context = run.context
    catching_up = [job for job in run.config.jobs if job.catchup is not None]

    def candidates(job: AuditedJob) -> list[ExpectedRun]:
        window = job_candidates(
            job,
            project=context.project,
            location=context.location,
            now=run.horizon,
            read_records=run.read_records,
            lease=run.lease,
            target=run.target,
            pauses=run.pauses,
        )
        if window.truncated:
            _window_truncated(run, job)
        return window.chosen

    chosen = first_to_deliver([entry for found in run.per_job(candidates, catching_up) for entry in found])
    jobs = {job.name: job for job in run.config.jobs}
    delivered: list[dict[str, str]] = []
    for entry in chosen:
        stamp = format_rfc3339(entry.schedule_time)
        fields: dict[str, object] = {
            log_fields.EVENT: log_fields.CATCHUP_DELIVERY,
            log_fields.JOB: entry.job,
            log_fields.SCHEDULE_TIME: stamp,
            log_fields.RUN_ID: entry.run_id,
            "audit_run_id": context.run_id,
            "recorded": entry.record is not None,
        }
        try:
            via = send(jobs[entry.job], entry.schedule_time)
        except RedeliveryError as error:
            fields["delivered"] = False
            structured_log.emit(
                "ERROR",
                f"{log_fields.CATCHUP_DELIVERY}: job {entry.job} scheduled at {stamp} not handed over: "
                f"{error}; the next audit tries again while the run is inside its catch-up window",
                fields,
                run.stream,
            )
            continue
        fields["delivered"], fields["via"] = True, via
        why = "was never delivered" if entry.record is None else f"never completed ({entry.detail})"
        structured_log.emit(
            "WARNING",
            f"{log_fields.CATCHUP_DELIVERY}: job {entry.job} scheduled at {stamp} {why}; "
            f"delivered again ({via})",
            fields,
            run.stream,
        )
        delivered.append({"job": entry.job, "schedule_time": stamp, "run_id": entry.run_id, "via": via})
    return delivered


def _window_truncated(run: AuditRun, job: AuditedJob) -> None:
    assert job.catchup is not None
    structured_log.emit(
        "WARNING",
        f"job {job.name}: its catch-up window ({job.catchup.window_seconds:g}s) holds more runs than an "
        "audit walks; only the newest were judged for catch-up",
        {log_fields.JOB: job.name, "audit_run_id": run.context.run_id},
        run.stream,
    )


def report_missed_runs(
    run: AuditRun, *, caught_up: frozenset[str] | set[str] = frozenset()
) -> list[ExpectedRun]:
    """Judge the runs whose window closed in the audit's span and log each missed one, but those
    `caught_up` (run ids this audit delivered again, each logged as a catch-up delivery); returns
    what was judged.

    The target on this audit run's own record is the stack's: the function that claimed it
    runs every job of the stack, so a run recorded by any other target is missed."""
    context = run.context
    due = runs_within_budget(run)
    span = run.span
    judged = judge_runs(
        due,
        project=context.project,
        location=context.location,
        now=span.until,
        read_records=run.read_records,
        lease=run.lease,
        target=run.target,
        pauses=run.pauses,
    )
    missed = [entry for entry in judged if entry.state is Verdict.MISSED and entry.run_id not in caught_up]
    counts = {verdict: sum(entry.state is verdict for entry in judged) for verdict in Verdict}
    for entry in missed:
        fields: dict[str, object] = {
            log_fields.EVENT: log_fields.MISSED_RUN,
            log_fields.JOB: entry.job,
            log_fields.SCHEDULE_TIME: format_rfc3339(entry.schedule_time),
            log_fields.RUN_ID: entry.run_id,
            "retry_window_closed": format_rfc3339(entry.window_closes),
            "claimed": entry.record is not None,
            "audit_run_id": context.run_id,
        }
        if entry.other_target is not None:
            fields["recorded_target"] = entry.other_target
        structured_log.emit(
            "ERROR",
            f"{log_fields.MISSED_RUN}: job {entry.job} scheduled at {format_rfc3339(entry.schedule_time)} "
            f"never completed: {entry.detail}",
            fields,
            run.stream,
        )
    cut = (
        f"; runs whose window closed before {format_rfc3339(span.not_judged)} were not judged"
        if span.not_judged
        else ""
    )
    errors = f"; {len(run.errors)} jobs not judged" if run.errors else ""
    left = (
        f"; the budget of {run.budget} runs was reached: runs whose window closed up to "
        f"{format_rfc3339(span.horizon)} are left for the next audit"
        if span.horizon
        else ""
    )
    structured_log.emit(
        "WARNING" if missed or run.errors or span.not_judged or span.horizon else "INFO",
        f"{log_fields.AUDIT_SUMMARY}: {len(missed)} of {len(judged)} runs missed, {counts[Verdict.PAUSED]} "
        f"paused, {counts[Verdict.SKIPPED_LATE]} skipped late, {len(caught_up)} delivered again "
        f"(retry windows closed in ({format_rfc3339(span.since)}, {format_rfc3339(span.until)}])"
        f"{cut}{errors}{left}",
        {
            log_fields.EVENT: log_fields.AUDIT_SUMMARY,
            "judged": len(judged),
            "missed": len(missed),
            "paused": counts[Verdict.PAUSED],
            "skipped_late": counts[Verdict.SKIPPED_LATE],
            "caught_up": len(caught_up),
            "jobs_not_judged": len(run.errors),
            "judged_from": format_rfc3339(span.since),
            "judged_until": format_rfc3339(span.until),
            "left_until": format_rfc3339(span.horizon) if span.horizon else None,
            "audit_run_id": context.run_id,
        },
        run.stream,
    )
    return judged


def runs_within_budget(run: AuditRun) -> list[tuple[AuditedJob, FireTime]]:
    """The runs of the span, of every job, in the order their windows close, up to the run's
    budget; when the next instant's runs would exceed it, the span is cut before that instant
    (`run.span` becomes the shorter span). The runs of one instant are taken whole, so the cut
    falls between two instants and the next audit's span starts exactly after the last run
    judged; the first instant is taken whatever its size, so every audit moves on."""
    span = run.span
    streams = [_closing(run, job, span.since) for job in run.config.jobs]
    taken: list[tuple[AuditedJob, FireTime]] = []
    taken_until = span.since
    closing = heapq.merge(*streams, key=lambda entry: entry[0])
    for closes, group in itertools.groupby(closing, key=lambda entry: entry[0]):
        if closes > span.until:
            break
        runs = [(job, fire) for _, job, fire in group]
        if taken and run.budget is not None and len(taken) + len(runs) > run.budget:
            run.span = Span(span.since, taken_until, span.not_judged, horizon=span.until)
            break
        taken.extend(runs)
        taken_until = closes
    return taken


def _closing(
    run: AuditRun, job: AuditedJob, after: datetime
) -> Iterator[tuple[datetime, AuditedJob, FireTime]]:
    """`job`'s runs closing after `after`, with their closing instant; a schedule the audit
    cannot walk is the job's error (logged once), and ends its runs there."""
    try:
        for fire in closing_after(job, after):
            yield window_closes(job, fire), job, fire
    except google_exceptions.GoogleAPIError:
        raise
    except Exception as error:  # AuditError, or anything croniter raises on a schedule
        run.job_error(job, error)
