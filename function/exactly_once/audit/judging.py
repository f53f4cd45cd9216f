"""The audit's verdicts on its span: the runs whose retry window closed in it, read in pages as
the audit's time allows (audit/budget.py), judged by the lifecycle, each missed one logged, and
one summary line."""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterator
from datetime import datetime

from google.api_core import exceptions as google_exceptions

from exactly_once import log_fields, structured_log
from exactly_once.audit.budget import PAGE_IDS
from exactly_once.audit.config import AuditedJob
from exactly_once.audit.missed_runs import (
    ExpectedRun,
    closing_after,
    judge_runs,
    window_closes,
)
from exactly_once.audit.schedule import FireTime
from exactly_once.audit.state import AuditRun, Span
from exactly_once.ledger.lifecycle import Verdict
from exactly_once.run_key import format_rfc3339


def report_missed_runs(
    run: AuditRun, *, caught_up: frozenset[str] | set[str] = frozenset()
) -> list[ExpectedRun]:
    """Judge the runs whose window closed in the audit's span and log each missed one, but those
    `caught_up` (run ids this audit delivered again, each logged as a catch-up delivery); returns
    what was judged.

    The target on this audit run's own record is the stack's: the function that claimed it
    runs every job of the stack, so a run recorded by any other target is missed."""
    context = run.context
    now = run.span.until
    read = run.deadline.reader(run.read_records)
    judged = [
        entry
        for page in pages_in_time(run)
        for entry in judge_runs(
            page,
            project=context.project,
            location=context.location,
            now=now,
            read_records=read,
            lease=run.lease,
            target=run.target,
            pauses=run.pauses,
        )
    ]
    judged.sort(key=lambda entry: (entry.schedule_time, entry.job))
    span = run.span
    missed = [entry for entry in judged if entry.state is Verdict.MISSED and entry.run_id not in caught_up]
    counts = Counter(entry.state for entry in judged)
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
        f"; {run.why_cut()}: runs whose window closed up to {format_rfc3339(span.horizon)} are left "
        "for the next audit"
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


def pages_in_time(run: AuditRun) -> Iterator[list[tuple[AuditedJob, FireTime]]]:
    """The runs of the span, of every job, in the order their windows close, in pages of at most
    PAGE_IDS ids (an instant's runs never split), for as long as the next page's read fits in the
    audit's time (and its cap on runs). Where it stops, `run.span` is cut after the last instant
    given, so the next audit's span starts exactly there; the first page is always given, so
    every audit moves on."""
    span = run.span
    streams = [_closing(run, job, span.since) for job in run.config.jobs]
    closing = heapq.merge(*streams, key=lambda entry: entry[0])
    page: list[tuple[AuditedJob, FireTime]] = []
    page_ids = given = 0
    taken_until = span.since
    for closes, group in itertools.groupby(closing, key=lambda entry: entry[0]):
        if closes > span.until:
            break
        runs = [(job, fire) for _, job, fire in group]
        ids = sum(len(fire.instants) for _, fire in runs)
        capped = run.max_runs is not None and given + len(page) + len(runs) > run.max_runs
        if page and (capped or page_ids + ids > PAGE_IDS):
            yield page
            given, page, page_ids = given + len(page), [], 0
            if capped or not run.deadline.fits_another():
                run.span = Span(span.since, taken_until, span.not_judged, horizon=span.until)
                run.capped = capped
                return
        page.extend(runs)
        page_ids += ids
        taken_until = closes
    if page:
        yield page


def _closing(
    run: AuditRun, job: AuditedJob, after: datetime
) -> Iterator[tuple[datetime, AuditedJob, FireTime]]:
    """`job`'s runs closing after `after`, with their closing instant; a schedule the audit
    cannot walk is the job's error (logged once), and ends its runs there."""
    try:
        for fire in closing_after(job, after, run.walks):
            yield window_closes(job, fire), job, fire
    except google_exceptions.GoogleAPIError:
        raise
    except Exception as error:  # AuditError, or anything croniter raises on a schedule
        run.job_error(job, error)
