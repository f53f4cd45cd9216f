"""Unix-cron schedules, read the way Cloud Scheduler reads them: is one valid and does it ever
fire, and how close can two of its runs come.

The timing rules (infra/timing/rules.py) need the shortest gap between runs, because Cloud Scheduler
stops retrying a run at the next scheduled one. Pure standard library, like the timing rules.
"""

from __future__ import annotations

import calendar
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_CRON_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    (
        "month",
        1,
        12,
        {m: i + 1 for i, m in enumerate(_MONTHS)},
    ),
    ("day of week", 0, 7, {d: i for i, d in enumerate(_WEEKDAYS)}),
)
# What each field's step repeats within, and how many values that holds: a step counts only
# inside its field's range and starts again at each hour, day, ... (day of week: 7 is Sunday too).
_STEP_SPANS = {
    "minute": ("hour", 60, "minutes"),
    "hour": ("day", 24, "hours"),
    "day of month": ("month", 31, "days"),
    "month": ("year", 12, "months"),
    "day of week": ("week", 7, "days"),
}
# The macros of Vixie cron, which Cloud Scheduler does not read, and the unix-cron they stand for.
CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_CRON_ITEM = re.compile(r"^(?:\*|(?P<lo>\w+)(?:-(?P<hi>\w+))?)(?:/(?P<step>\d+))?$")

# A leap-year cycle, from a leap year: every month length is seen, 29 February too, in leap and
# common years. Whether a schedule ever fires is read over it.
_CYCLE = (date(2028, 1, 1), date(2032, 1, 1))


@dataclass(frozen=True)
class _CronSpec:
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday (7 folded into 0)
    any_day_of_month: bool
    any_day_of_week: bool

    def runs_on(self, day: date) -> bool:
        """Vixie cron: when both day fields are restricted, either one matching is enough."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        if self.any_day_of_month or self.any_day_of_week:
            return dom and dow
        return dom or dow


def _parse_cron(schedule: str) -> _CronSpec:
    fields = schedule.split()
    if fields[:1] and fields[0].startswith("@"):
        macro = fields[0].lower()
        instead = f"use `{CRON_MACROS[macro]}`" if macro in CRON_MACROS else "write the five fields"
        raise ValueError(f"schedule {schedule!r}: macros are not unix-cron: {instead}")
    if len(fields) != 5:
        hint = " (groc syntax such as 'every 5 minutes' is not supported)" if fields[:1] == ["every"] else ""
        raise ValueError(f"schedule {schedule!r} has {len(fields)} fields, unix-cron needs 5{hint}")
    values: list[frozenset[int]] = []
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        expanded: set[int] = set()
        for item in text.split(","):
            match = _CRON_ITEM.match(item)
            if match is None:
                raise ValueError(f"schedule {schedule!r}: {name} item {item!r} is not unix-cron")
            bounds = []
            for part in (match["lo"], match["hi"]):
                if part is None:
                    continue
                value = names.get(part.upper()) if not part.isdigit() else int(part)
                if value is None or not low <= value <= high:
                    raise ValueError(f"schedule {schedule!r}: {name} value {part!r} is outside {low}-{high}")
                bounds.append(value)
            step = int(match["step"]) if match["step"] is not None else 1
            if step == 0:
                raise ValueError(f"schedule {schedule!r}: {name} step must be positive")
            span, size, unit = _STEP_SPANS[name]
            if step > size:
                raise ValueError(
                    f"schedule {schedule!r}: {name} step {step} is larger than the field's range "
                    f"{low}-{high}: the step starts again each {span}, so {item!r} would fire once "
                    f"per {span}, not every {step} {unit}"
                )
            if not bounds:
                first, last = low, high  # "*" or "*/15"
            elif len(bounds) == 1:
                first = bounds[0]
                last = high if match["step"] else first  # "5/15": from 5 to the end, every 15
            else:
                first, last = bounds
            if last < first:
                raise ValueError(f"schedule {schedule!r}: {name} range {item!r} runs backwards")
            expanded.update(range(first, last + 1, step))
        values.append(frozenset(expanded))
    minutes, hours, days_of_month, months, days_of_week = values
    return _CronSpec(
        minutes,
        hours,
        days_of_month,
        months,
        frozenset(d % 7 for d in days_of_week),
        any_day_of_month=fields[2] == "*",
        any_day_of_week=fields[4] == "*",
    )


def unix_cron_error(schedule: str) -> str | None:
    """Why `schedule` is not a five-field unix-cron expression that fires, or None when it is.

    Only unix-cron jobs get the X-CloudScheduler-ScheduleTime header that identifies a run;
    a groc schedule such as "every 5 minutes" would make every delivery look the same. A
    schedule whose fields are each in range can still name no day at all (31 February):
    Cloud Scheduler accepts it and never runs it, and the missed-run audit cannot compute
    its runs.
    """
    try:
        spec = _parse_cron(schedule)
    except ValueError as error:
        return str(error)
    if not any(spec.runs_on(day) for day in _days(*_CYCLE)):
        return f"schedule {schedule!r} never fires: {_no_such_day(spec)}"
    return None


def _no_such_day(spec: _CronSpec) -> str:
    """Why no day matches: only a day of month that no month of the schedule has can do that
    (a day-of-week field, or a `*` day of month, matches in every month)."""
    days, months = sorted(spec.days_of_month), sorted(spec.months)
    longest = max(calendar.monthrange(_CYCLE[0].year, month)[1] for month in months)  # a leap year
    day_text = f"day {days[0]} never occurs" if len(days) == 1 else f"days {_listed(days)} never occur"
    month_text = (
        f"month {months[0]}, which has" if len(months) == 1 else f"months {_listed(months)}, which have"
    )
    return f"{day_text} in {month_text} at most {longest} days"


def _listed(values: list[int]) -> str:
    return ", ".join(str(value) for value in values)


def schedule_min_interval_seconds(schedule: str) -> float | None:
    """The shortest gap between two fire times of a unix-cron schedule, in wall-clock time
    over a leap year (a DST change can shorten one gap by an hour); None if it never fires
    twice in that year or is not unix-cron.

    Cloud Scheduler stops retrying a run at the next scheduled execution (or, per newer docs,
    may skip that execution while retries go on), so the gap bounds how long retries last.
    """
    try:
        spec = _parse_cron(schedule)
    except ValueError:
        return None
    times_of_day = sorted(h * 3600 + m * 60 for h in spec.hours for m in spec.minutes)
    gaps = [b - a for a, b in itertools.pairwise(times_of_day)]
    start = date(2028, 1, 1)  # a leap year, so 29 February schedules are seen
    run_days = [d for d in (start + timedelta(days=n) for n in range(366 + 7)) if spec.runs_on(d)]
    for earlier, later in itertools.pairwise(run_days):
        gaps.append((later - earlier).days * 86_400 - times_of_day[-1] + times_of_day[0])
    return float(min(gaps)) if gaps else None


def _days(first: date, end: date) -> Iterator[date]:
    for ordinal in range(first.toordinal(), end.toordinal()):
        yield date.fromordinal(ordinal)
