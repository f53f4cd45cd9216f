"""`page`: one static HTML page per stack, each job's recent runs as a row a team can look at.

Cloud Scheduler's console shows one field of history per job, the last attempt's status; the
ledger holds every run of the retention. The page lays them out: a row per job, a cell per
run in schedule order, coloured by the audit's verdict, with the run's local time, duration
and what it ended as; then the job's next fire times. It is one file with its style inline
and nothing fetched from anywhere (no script, no font, no image), so it opens from a disk, an
artifact store or a mail attachment alike, and shows what was true when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any, Final, TextIO

from exactly_once.ledger.lifecycle import JobResult, Verdict
from exactly_once.run_key import format_rfc3339
from ops.context import StackContext, utc_now
from ops.exit_codes import ExitCode
from ops.history import JobHistory, job_histories
from ops.ledger_view import job_status_line
from ops.next_runs import next_runs

# Scheduled runs per job on the page, and next fire times.
PAGE_RUNS = 24
PAGE_NEXT_RUNS = 5
DEFAULT_PAGES_DIR = Path(".pages")

# Each verdict's colour, and what the legend says of it.
_VERDICT_STYLES: Final = {
    Verdict.COMPLETED: ("#2e7d32", "ran once"),
    Verdict.DOWNSTREAM_FAILED: ("#6a1b9a", "ran once; the work it started failed"),
    Verdict.TERMINAL_FAILURE: ("#b71c1c", "ran and failed for good"),
    Verdict.SKIPPED_LATE: ("#ef6c00", "delivered past its starting deadline, never run"),
    Verdict.PAUSED: ("#757575", "never run: the job was paused"),
    Verdict.IN_PROGRESS: ("#1565c0", "running, or released for a retry"),
    Verdict.PENDING: ("#90a4ae", "not delivered yet; its retries may still come"),
    Verdict.MISSED: ("#d50000", "no attempt completed it, and none can now"),
}
_MANUAL_COLOUR = "#00838f"

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #212121; }
h1 { font-size: 20px; margin: 0 0 4px; }
.meta { color: #616161; margin: 0 0 12px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 14px; margin: 0 0 16px; padding: 0; list-style: none; }
.legend li { display: flex; align-items: center; gap: 6px; }
.swatch { width: 14px; height: 14px; border-radius: 3px; display: inline-block; }
.job { display: grid; grid-template-columns: 260px 1fr; gap: 12px; padding: 12px 0;
       border-top: 1px solid #e0e0e0; }
.label { overflow-wrap: anywhere; }
.label .name { font-weight: 600; }
.label .schedule, .label .status { color: #616161; font-size: 12px; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 11px; color: #fff;
         background: #424242; margin-left: 4px; }
.track { display: flex; flex-wrap: wrap; gap: 4px; align-content: flex-start; }
.run { width: 76px; min-height: 44px; border-radius: 4px; color: #fff; font-size: 11px;
       padding: 3px 4px; box-sizing: border-box; }
.run .when { font-weight: 600; }
.run.marked { outline: 2px dashed #212121; outline-offset: -2px; }
.next { grid-column: 2; color: #424242; font-size: 12px; }
.empty { color: #757575; font-style: italic; }
"""


def stack_page(
    context: StackContext,
    *,
    jobs: Sequence[str] | None = None,
    runs: int = PAGE_RUNS,
    now: datetime | None = None,
) -> str:
    """The page of `jobs` (default: every job of the stack, the audit's own included)."""
    now = now or utc_now()
    names = list(jobs) if jobs is not None else [job.name for job in context.settings.jobs]
    rows = [_job_row(context, found, now) for found in job_histories(context, names, last=runs, now=now)]
    legend = "".join(
        _legend_item(colour, f"{verdict.value}: {text}")
        for verdict, (colour, text) in _VERDICT_STYLES.items()
    )
    legend += _legend_item(_MANUAL_COLOUR, "manual run (run-now)")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Stack {escape(context.stack)}: runs</title><style>{_STYLE}</style></head>\n<body>\n"
        f"<h1>Stack {escape(context.stack)}: its jobs' latest runs</h1>\n"
        f'<p class="meta">written {format_rfc3339(now)} from the ledger in project '
        f"{escape(context.firestore_project)}, database {escape(context.database)}, collection "
        f"{escape(context.settings.runs_collection)}; oldest run left, newest right; hover a run for "
        "its details</p>\n"
        f'<ul class="legend">{legend}</ul>\n<main>\n' + "\n".join(rows) + "\n</main>\n</body></html>\n"
    )


def _legend_item(colour: str, text: str) -> str:
    return f'<li><span class="swatch" style="background:{colour}"></span>{escape(text)}</li>'


def _job_row(context: StackContext, found: JobHistory, now: datetime) -> str:
    settings, audited = found.settings, found.audited
    badges = '<span class="badge">PAUSED</span>' if settings.paused else ""
    label = (
        f'<div class="label"><div class="name">{escape(settings.name)}{badges}</div>'
        f'<div class="schedule">{escape(audited.schedule)} in {escape(audited.time_zone)}</div>'
        f'<div class="status">{escape(job_status_line(context, audited.name, settings))}</div></div>'
    )
    cells = [_run_cell(entry) for entry in reversed(found.runs)]
    cells += [_run_cell(entry, manual=True) for entry in reversed(found.manual)]
    track = "".join(cells) or '<span class="empty">no scheduled runs in the retention window</span>'
    upcoming = ", ".join(
        f"{run.local.strftime('%Y-%m-%d %H:%M %Z')} ({format_rfc3339(run.fire.instant)})"
        for run in next_runs(audited.schedule, audited.time_zone, now, PAGE_NEXT_RUNS)
    )
    return (
        f'<section class="job" data-job="{escape(settings.name)}">{label}'
        f'<div class="track">{track}</div><div class="next">next: {escape(upcoming)}</div></section>'
    )


def _run_cell(entry: dict[str, Any], *, manual: bool = False) -> str:
    """One run: its local time (a manual run's claim time, in UTC), duration and verdict;
    the rest in its tooltip. A run that ended other than by succeeding is outlined."""
    if manual:
        colour, when = _MANUAL_COLOUR, _hour_and_minute(entry["claimed_at"]) + "Z"
    else:
        colour = _VERDICT_STYLES[Verdict(entry["outcome"])][0]
        when = _hour_and_minute(entry["schedule_time_local"])
    duration = entry["duration_seconds"]
    result = entry["result"]
    marked = result not in (None, JobResult.SUCCEEDED.value) or entry["caught_up"]
    details = [f"{key}: {value}" for key, value in entry.items() if value is not None and key != "trigger"]
    return (
        f'<div class="run{" marked" if marked else ""}" style="background:{colour}" '
        f'data-run-id="{escape(str(entry["run_id"] or ""))}" data-outcome="{escape(str(entry["outcome"]))}" '
        f'title="{escape(chr(10).join(details))}">'
        f'<div class="when">{escape(when)}</div>'
        f"<div>{escape(f'{duration:.1f}s' if duration is not None else '-')}</div>"
        f"<div>{escape(str(result or entry['outcome']).replace('_', ' '))}</div></div>"
    )


def _hour_and_minute(rfc3339: str | None) -> str:
    """`HH:MM` of an RFC 3339 time as the entries spell it (`2026-10-25T02:30:00+01:00`)."""
    return rfc3339[11:16] if rfc3339 else "?"


def write_page(
    context: StackContext,
    path: Path,
    *,
    jobs: Sequence[str] | None = None,
    runs: int = PAGE_RUNS,
    now: datetime | None = None,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stack_page(context, jobs=jobs, runs=runs, now=now), encoding="utf-8")
    return path


def page(context: StackContext, out: TextIO, *, output: Path | None, runs: int) -> ExitCode:
    """`ops page`: writes the stack's page and prints its path."""
    path = write_page(context, output or DEFAULT_PAGES_DIR / f"{context.stack}.html", runs=runs)
    out.write(f"page: {path}\n")
    return ExitCode.OK
