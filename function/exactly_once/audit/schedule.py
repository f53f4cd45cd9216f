"""When a job's unix-cron schedule fires, read in its time zone as Cloud Scheduler reads it.

Cron fields are wall-clock times, so croniter walks naive local times and zoneinfo turns each
into an instant; croniter never sees an offset and cannot get a daylight-saving change wrong.

Cloud Scheduler documents no rule for the two wall-clock hours a change makes odd, so the
audit reads them in the way that can never make a run up:

- a wall time skipped by spring-forward never happens, so it does not fire;
- a wall time repeated by fall-back is **one** expected run with two possible instants
  (`FireTime.repeated`): Scheduler may deliver it at either. It counts as delivered when either
  instant has a record, and catch-up delivers it at the first, and only when neither has one.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from exactly_once.audit.config import AuditError
from exactly_once.run_key import format_rfc3339


@dataclass(frozen=True)
class FireTime:
    """One expected run: the instant its wall time first occurs, and the second instant of a
    wall time that a fall-back repeats (None for every other)."""

    instant: datetime  # UTC
    repeated: datetime | None = None

    @property
    def instants(self) -> tuple[datetime, ...]:
        return (self.instant,) if self.repeated is None else (self.instant, self.repeated)


def checked_schedule(schedule: str, time_zone: str) -> ZoneInfo:
    """The schedule's zone, once both the zone and the cron expression are known to be valid."""
    try:
        zone = ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise AuditError(f"{time_zone!r} is not an IANA time zone") from None
    if not croniter.is_valid(schedule):
        raise AuditError(f"{schedule!r} is not a unix-cron schedule")
    return zone


def following_fires(schedule: str, zone: ZoneInfo, after: datetime) -> Iterator[FireTime]:
    """The schedule's fire times strictly after `after`, in order. A schedule that never fires
    (`0 0 31 2 *`: no 31st of February) raises AuditError when the walk finds no next date."""
    iterator = croniter(schedule, after.astimezone(zone).replace(tzinfo=None))
    last = after
    while True:
        try:
            wall: datetime = iterator.get_next(datetime)
        except CroniterBadDateError:
            raise AuditError(f"schedule {schedule!r} never fires: no date matches all its fields") from None
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        if first.astimezone(zone).replace(tzinfo=None) != wall:
            continue  # inside a spring-forward gap: this wall time never happens
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if first > last:
            last = first
            yield FireTime(first, second if second != first else None)


class SharedWalks:
    """Each (schedule, zone, start) walked once, however many jobs walk it. A stack's jobs share
    few schedules (a thousand every-minute jobs, one), and a croniter step per run of every job
    cost the audit of a large stack more than any other part but its reads. The walks are kept
    as long as the object: one audit run's."""

    def __init__(self) -> None:
        self._walks: dict[tuple[str, ZoneInfo, datetime], _Walk] = {}

    def following(self, schedule: str, zone: ZoneInfo, after: datetime) -> Iterator[FireTime]:
        """following_fires(schedule, zone, after), each fire time computed once for all callers."""
        key = (schedule, zone, after)
        walk = self._walks.get(key)
        if walk is None:
            walk = self._walks[key] = _Walk(following_fires(schedule, zone, after))
        return iter(walk)


class _Walk:
    """A walk's fire times so far, extended on demand; what ended it (a schedule that never
    fires) ends every later reader's walk alike."""

    def __init__(self, source: Iterator[FireTime]) -> None:
        self._source = source
        self._fires: list[FireTime] = []
        self._error: Exception | None = None

    def __iter__(self) -> Iterator[FireTime]:
        index = 0
        while True:
            if index == len(self._fires):
                if self._error is not None:
                    raise self._error
                try:
                    self._fires.append(next(self._source))
                except Exception as error:
                    self._error = error
                    raise
            yield self._fires[index]
            index += 1


def following_fire_times(schedule: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """The first instant of each fire time strictly after `after`: what a scheduler that fires
    a repeated wall time once, at its first occurrence, sends (the local scheduler does)."""
    return (fire.instant for fire in following_fires(schedule, zone, after))


def fires(
    schedule: str, time_zone: str, since: datetime, until: datetime, *, newest: int | None = None
) -> list[FireTime]:
    """The fire times whose first instant lies in [since, until], oldest first; with `newest`,
    only that many of the latest (a walk of a wide window stays bounded without failing)."""
    if since.tzinfo is None or until.tzinfo is None:
        raise AuditError("audit window bounds must carry a time zone offset")
    if until < since:
        raise AuditError(
            f"the window ends ({format_rfc3339(until)}) before it starts ({format_rfc3339(since)})"
        )
    zone = checked_schedule(schedule, time_zone)
    found: deque[FireTime] = deque(maxlen=newest)
    # From one second before `since`, so a fire time exactly at `since` is included.
    following = following_fires(schedule, zone, since - timedelta(seconds=1))
    for fire in itertools.takewhile(lambda fire: fire.instant <= until, following):
        if fire.instant >= since:  # else `since` had a fraction of a second
            found.append(fire)
    return list(found)


def fire_times(schedule: str, time_zone: str, since: datetime, until: datetime) -> list[datetime]:
    """The first instants of the fire times in [since, until] (what the ops CLI lists)."""
    return [fire.instant for fire in fires(schedule, time_zone, since, until)]
