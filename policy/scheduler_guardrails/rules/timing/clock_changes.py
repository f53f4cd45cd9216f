"""Which runs of a schedule fall in an hour its time zone skips (the clocks go forward) or
repeats (they go back), and the advisory `make check` and `pulumi up` print for them.

Cloud Scheduler documents no rule for such a run: it only says that jobs scheduled in such an
hour "might observe execution anomalies" and recommends UTC. Pure standard library, like the
timing rules (rules/timing/rules.py), whose Violation it speaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from .cron import DEFAULT_TIME_ZONE, parse_cron, wall_datetime, zone_transitions
from .rules import JobTiming, Violation


@dataclass(frozen=True)
class ClockChange:
    """A span of wall-clock time a zone skips (its clocks go forward) or repeats (they go back),
    and the runs of a schedule that fall in it, as naive wall-clock times of the zone."""

    start: datetime
    end: datetime
    skipped: bool
    runs: tuple[datetime, ...]


def runs_in_clock_changes(schedule: str, time_zone: str, since: date, until: date) -> list[ClockChange]:
    """Every clock change of `time_zone` whose skipped or repeated span starts on a day from
    `since` to before `until` and holds a run of the schedule (wall clock); [] for a schedule
    that is not unix-cron."""
    try:
        spec = parse_cron(schedule)
    except ValueError:
        return []
    changes: list[ClockChange] = []
    for transition in zone_transitions(time_zone, since, until):
        low, high = transition.walls
        start = wall_datetime(low)
        if not since <= start.date() < until:
            continue
        minute = -(-low // 60) * 60  # the first whole minute of the span
        runs = tuple(
            wall
            for wall in (wall_datetime(second) for second in range(minute, high, 60))
            if spec.fires_at(wall)
        )
        if runs:
            skipped = transition.after > transition.before
            changes.append(ClockChange(start, wall_datetime(high), skipped, runs))
    return changes


def check_clock_changes(job: JobTiming, since: date) -> list[Violation]:
    """Advisory: the job's schedule names a wall-clock time inside an hour its zone skips or
    repeats in the year from `since`.

    Cloud Scheduler documents no rule for such a run: it only says that jobs scheduled in
    such an hour "might observe execution anomalies" and recommends UTC. The function's audit
    expects no run in a skipped hour and one, at its first occurrence, in a repeated hour; if
    Cloud Scheduler does otherwise, the two disagree: a run reported missed that ran under
    another schedule time, or the repeated hour's run delivered twice, as two runs.
    """
    until = _a_year_after(since)
    changes = runs_in_clock_changes(job.schedule, job.time_zone, since, until)
    if not changes:
        return []
    spans = "; ".join(
        f"on {change.start:%Y-%m-%d} the clocks {'skip' if change.skipped else 'repeat'} "
        f"{change.start:%H:%M}-{change.end:%H:%M} and it fires at {_walls(change.runs)}"
        for change in changes
    )
    return [
        Violation(
            "clock-change-hour",
            ("time_zone", "schedule"),
            f"schedule {job.schedule!r} in {job.time_zone} fires in hours the zone skips or repeats "
            f"({spans}): Cloud Scheduler documents no rule for those runs (it warns that they might observe "
            f"execution anomalies); set the time zone to {DEFAULT_TIME_ZONE}, or move the runs out of those "
            "hours",
            advisory=True,
        )
    ]


def _a_year_after(day: date) -> date:
    """The same date a year later (29 February: 1 March)."""
    try:
        return day.replace(year=day.year + 1)
    except ValueError:
        return date(day.year + 1, 3, 1)


def _walls(runs: tuple[datetime, ...]) -> str:
    """'01:30' or '01:00, 01:15, 01:30, 01:45', the first four of longer lists and how many more."""
    shown = ", ".join(f"{run:%H:%M}" for run in runs[:4])
    return shown if len(runs) <= 4 else f"{shown} and {len(runs) - 4} more"
