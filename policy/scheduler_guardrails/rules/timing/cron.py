"""Unix-cron schedules, read the way Cloud Scheduler reads them: is one valid and does it ever
fire, how close can two of its runs come, how many can fall in a window (which of them fall in
an hour its time zone skips or repeats: rules/timing/clock_changes.py).

The timing rules (rules/timing/rules.py) need the shortest gap between runs, because Cloud Scheduler
stops retrying a run at the next scheduled one, and the catch-up rule (rules/timing/catchup.py)
needs how many runs a window holds. Both are elapsed time, not wall-clock time: cron fields are
wall-clock times in the job's zone, and a clock change makes one hour of the wall clock zero or
two hours long. So a run's instant is read the way the function's audit reads it
(exactly_once/audit/missed_runs.py::following_fire_times): a wall time skipped by spring-forward
does not fire, one repeated by fall-back fires once, at its first occurrence.

Pure standard library (zoneinfo, no croniter), like the timing rules.
"""

from __future__ import annotations

import calendar
import functools
import math
import operator
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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

# Cloud Scheduler's zone for a job that names none, and the one Google recommends: it has no
# clock changes.
DEFAULT_TIME_ZONE = "Etc/UTC"
# A leap-year cycle, from a leap year: every month length is seen, 29 February too, in leap and
# common years. Whether a schedule ever fires, and how many runs a window holds, are read over it.
_CYCLE = (date(2028, 1, 1), date(2032, 1, 1))
# The shortest gap is looked for over one leap year (every clock change of the zone's year, and
# 29 February) and the week after it (the gap across New Year, and a weekly job's next run).
_GAP_YEAR = (date(2028, 1, 1), date(2029, 1, 8))
_DAY_SECONDS = 86_400
# How long a window the catch-up count looks at, at most: the Gregorian calendar's 400 years.
_LONGEST_COUNTED_DAYS = 146_097
# The most runs listed one by one to count a window (a cycle of a job each minute and the
# window after it): beyond, the count is what the cycle alone holds.
_MOST_RUNS_LISTED = 5_000_000
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


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

    def times_of_day(self) -> list[int]:
        """Seconds after midnight, wall clock, of every run of a day it runs on, ascending."""
        return sorted(h * 3600 + m * 60 for h in self.hours for m in self.minutes)

    def fires_at(self, wall: datetime) -> bool:
        """Whether the schedule names this wall-clock minute."""
        return self.runs_on(wall.date()) and wall.hour in self.hours and wall.minute in self.minutes


def parse_cron(schedule: str) -> _CronSpec:
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
        spec = parse_cron(schedule)
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


@dataclass(frozen=True)
class RunGap:
    """The shortest time between two consecutive runs, and the two runs (in the job's zone)."""

    seconds: float
    earlier: datetime
    later: datetime

    @property
    def clock_change(self) -> float:
        """How much a clock change between the two runs adds to their wall-clock gap (negative:
        the clocks went forward, and the runs are closer than the wall clock says)."""
        wall = self.later.replace(tzinfo=None) - self.earlier.replace(tzinfo=None)
        return self.seconds - wall.total_seconds()


@functools.lru_cache(maxsize=1024)
def shortest_gap(schedule: str, time_zone: str) -> RunGap | None:
    """The shortest elapsed time between two consecutive runs of a unix-cron schedule read in
    `time_zone`, over a leap year and the week after it, clock changes included; None if it
    never fires twice in that time or is not unix-cron.

    Cloud Scheduler stops retrying a run at the next scheduled execution (or, per newer docs,
    may skip that execution while retries go on), so the gap bounds how long retries last.
    In a zone with daylight saving time the spring-forward day brings two runs an hour closer
    than the wall clock says (an every-two-hours job's runs at 00:00 and 02:00 are 3600 s
    apart); fall-back moves them apart, since a repeated hour fires only once.
    """
    try:
        spec = parse_cron(schedule)
    except ValueError:
        return None
    runs = _instants(spec, time_zone, *_GAP_YEAR)
    if len(runs) < 2:
        return None
    gaps = list(map(operator.sub, runs[1:], runs))
    seconds = min(gaps)
    index = gaps.index(seconds)
    zone = _zone(time_zone)
    return RunGap(
        float(seconds),
        datetime.fromtimestamp(runs[index], zone),
        datetime.fromtimestamp(runs[index + 1], zone),
    )


def schedule_min_interval_seconds(schedule: str, time_zone: str) -> float | None:
    """`shortest_gap`'s seconds: what the timing rules compare retries with."""
    gap = shortest_gap(schedule, time_zone)
    return gap.seconds if gap is not None else None


@dataclass(frozen=True)
class CrowdedWindow:
    """A window length that can hold more runs of a schedule than a limit allows."""

    runs: int  # the most runs of the schedule a window of that length holds
    widest_seconds: float  # the longest window that never holds more than the limit
    # False: `runs` is only what part of such a window holds (a window longer than 400 years, or
    # too many runs to list one by one: what a leap-year cycle alone holds).
    exact: bool = True


@functools.lru_cache(maxsize=256)
def crowded_window(schedule: str, time_zone: str, window_seconds: float, limit: int) -> CrowdedWindow | None:
    """None when no `window_seconds` of elapsed time holds more than `limit` runs of the
    schedule read in `time_zone`; else how many one can hold, and the widest window that holds
    at most `limit`. A window is `(end - window_seconds, end]`, as the audit's catch-up window
    is, so a run every minute puts 10,080 runs in a week, not 10,081.

    Counted run by run over the windows that start in a leap-year cycle, not estimated from
    the shortest gap: `0,1 0 * * *` has runs a minute apart, but two a day. Windows longer than
    400 years are counted as 400 years long.
    """
    if not window_seconds > 0:
        return None
    try:
        spec = parse_cron(schedule)
    except ValueError:
        return None
    first, end = _CYCLE
    counted = min(window_seconds, _LONGEST_COUNTED_DAYS * _DAY_SECONDS)
    changes = zone_transitions(time_zone, first, end + timedelta(days=math.ceil(counted / _DAY_SECONDS)))
    offsets = [offset for change in changes for offset in (change.before, change.after)]
    # No window touches more local days than this: its wall-clock span is at most its length
    # plus the widest swing of the zone's offset.
    days_touched = int((counted + max(offsets, default=0) - min(offsets, default=0)) // _DAY_SECONDS) + 2
    per_day = len(spec.times_of_day())
    day_runs = [
        per_day if spec.runs_on(day) else 0 for day in _days(first, end + timedelta(days=days_touched))
    ]
    if _most_in_a_row(day_runs, days_touched) <= limit:
        return None  # the common case, settled without listing a run
    runs = _instants(spec, time_zone, first, end)
    starts = len(runs)  # every window that starts at a run of the cycle is looked at
    exact = sum(day_runs) <= _MOST_RUNS_LISTED
    # Listing the runs after the cycle: all a window can reach, or (too many to list) as many as
    # the widest window that fits can reach.
    after = end
    while after < end + timedelta(days=days_touched) and (exact or len(runs) - starts <= limit):
        following = min(after + timedelta(days=366), end + timedelta(days=days_touched))
        runs.extend(run for run in _instants(spec, time_zone, after, following) if not runs or run > runs[-1])
        after = following
    if len(runs) <= limit:
        return None
    widest = min(map(operator.sub, runs[limit : limit + starts], runs))
    if widest >= counted:
        return None
    if not exact:
        # Only a window longer than the cycle reaches this many runs (one cycle holds at most
        # 2,103,840, a run each minute): it holds the whole cycle.
        return CrowdedWindow(starts, float(widest), exact=False)
    most, later = 0, 0
    for index in range(starts):
        reach = runs[index] + counted
        while later < len(runs) and runs[later] < reach:
            later += 1
        most = max(most, later - index)
    return CrowdedWindow(most, float(widest), exact=counted == window_seconds)


def _most_in_a_row(values: list[int], span: int) -> int:
    """The largest sum of `span` consecutive values."""
    total = most = sum(values[:span])
    for leaving, entering in zip(values, values[span:], strict=False):
        total += entering - leaving
        most = max(most, total)
    return most


@dataclass(frozen=True)
class _Transition:
    """A change of a zone's UTC offset, in Unix seconds."""

    instant: int
    before: int
    after: int

    @property
    def walls(self) -> tuple[int, int]:
        """The wall-clock span the change skips (the offset grows) or repeats (it shrinks), as
        seconds of a wall clock counted like Unix time."""
        return self.instant + min(self.before, self.after), self.instant + max(self.before, self.after)


def _zone(time_zone: str) -> tzinfo:
    """The zone; UTC for one this machine cannot read (the settings refuse an unknown zone
    wherever a tz database exists: infra/settings/jobs.py)."""
    try:
        return ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def _offset(zone: tzinfo, instant: int) -> int:
    offset = datetime.fromtimestamp(instant, zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


@functools.lru_cache(maxsize=256)
def zone_transitions(time_zone: str, first: date, end: date) -> tuple[_Transition, ...]:
    """Every change of the zone's offset from two days before local day `first` to two days after
    `end`: the offset is read once a day, and a change is bisected to its second (a zone
    changes its clocks months apart, never twice in a day)."""
    zone = _zone(time_zone)
    found: list[_Transition] = []
    instant = _wall_seconds(first) - 2 * _DAY_SECONDS
    offset = _offset(zone, instant)
    while instant < _wall_seconds(end) + 2 * _DAY_SECONDS:
        following = instant + _DAY_SECONDS
        changed = _offset(zone, following)
        if changed != offset:
            low, high = instant, following
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if _offset(zone, middle) == offset else (low, middle)
            found.append(_Transition(high, offset, changed))
        instant, offset = following, changed
    return tuple(found)


def _instants(spec: _CronSpec, time_zone: str, first: date, end: date) -> array[int]:
    """Unix seconds of every run on the local days from `first` to before `end`, ascending.

    A day no clock change touches is its wall-clock times less the day's offset; a day one
    touches is read time by time through zoneinfo, as the audit reads it.
    """
    zone = _zone(time_zone)
    times = spec.times_of_day()
    touched: set[int] = set()
    for transition in zone_transitions(time_zone, first, end):
        low, high = transition.walls
        touched.update(range(low // _DAY_SECONDS, (high - 1) // _DAY_SECONDS + 1))
    runs: array[int] = array("q")  # 8 bytes a run: a cycle of a job each minute is 2,103,840
    for day in _days(first, end):
        if not spec.runs_on(day):
            continue
        midnight = _wall_seconds(day)
        if midnight // _DAY_SECONDS in touched:
            for time_of_day in times:
                run = _instant(zone, midnight + time_of_day)
                if run is not None and (not runs or run > runs[-1]):
                    runs.append(run)
            continue
        noon = datetime.combine(day, time(12), tzinfo=zone).utcoffset()
        base = midnight - int(noon.total_seconds() if noon is not None else 0)
        day_runs = [base + time_of_day for time_of_day in times]
        if runs and day_runs[0] <= runs[-1]:
            day_runs = [run for run in day_runs if run > runs[-1]]
        runs.extend(day_runs)
    return runs


def _instant(zone: tzinfo, wall: int) -> int | None:
    """The Unix second a wall-clock time of `zone` first occurs at; None inside a
    spring-forward gap, where it never occurs."""
    local = wall_datetime(wall)
    instant = int(local.replace(tzinfo=zone, fold=0).timestamp())
    if datetime.fromtimestamp(instant, zone).replace(tzinfo=None) != local:
        return None
    return instant


def _days(first: date, end: date) -> Iterator[date]:
    for ordinal in range(first.toordinal(), end.toordinal()):
        yield date.fromordinal(ordinal)


def _wall_seconds(day: date) -> int:
    """Local midnight of `day`, on a wall clock counted like Unix time."""
    return (day.toordinal() - _EPOCH_ORDINAL) * _DAY_SECONDS


def wall_datetime(wall: int) -> datetime:
    return datetime(1970, 1, 1) + timedelta(seconds=wall)
