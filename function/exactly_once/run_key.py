"""The run's identity: which run of which job a delivery, a record or an audit verdict is.

(project, location, job name, schedule time) names a scheduled run; a run forced ahead of its
time has an identity of its own (its `trigger`). The job name in that tuple is the job's run
key: the Cloud Scheduler job id it is delivered by, unless the job table gives the job a
`run_key` of its own, which outlives a rename of the job (docs/jobs.md, "Renaming a job").
The ledger keys its records by `run_id`, the delivery reads the key from Cloud Scheduler's
headers (delivery/scheduler_request.py), and the audit computes the ids of the runs a schedule
expects, all with this module: it stands below all of them, so none reaches up to another for it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# What a Cloud Scheduler job id may hold, and so a run key (which keys runs in its place). A
# comma cannot be part of one: servers join repeated headers with ", ", so two job-name
# headers would otherwise name a third job; nor can "|", which joins a job status document's id.
JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")
# The encoder of a run's canonical tuple: json.dumps(fields, separators=(",", ":")), built once
# (json.dumps builds an encoder per call for any non-default argument).
_CANONICAL_JSON = json.JSONEncoder(separators=(",", ":"))
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$")


class Trigger(StrEnum):
    """What started a run: its schedule, or a person forcing the job ahead of it."""

    SCHEDULED = "scheduled"
    # Delivered ahead of the ScheduleTime it carries: a forced run announcing the next
    # scheduled run's time. One forced run per (job, announced time); see docs/operations.md.
    FORCED = "forced"


@dataclass(frozen=True)
class RunKey:
    """One run of one job, whichever delivery of it this is."""

    project: str
    location: str
    # The Cloud Scheduler job id as delivered (X-CloudScheduler-JobName): what the job table's
    # per-job policy and the logs' `job` label name the job by.
    job_name: str
    schedule_time: datetime  # UTC
    trigger: Trigger = Trigger.SCHEDULED
    # The job's run key from the job table, when it has one of its own; None: `job_name`.
    run_key: str | None = None

    @property
    def key_name(self) -> str:
        """What the job's runs and status are keyed by: its run key, else its job id. Kept apart
        from `job_name` so renaming a job that keeps its run key changes no run id."""
        return self.job_name if self.run_key is None else self.run_key

    @property
    def forced(self) -> bool:
        return self.trigger is Trigger.FORCED

    def as_triggered(self, trigger: Trigger) -> RunKey:
        """The same delivery read as `trigger`'s run."""
        return replace(self, trigger=trigger)

    def at_first_occurrence(self, zone: ZoneInfo | None) -> RunKey:
        """The run this delivery is when its job's schedule is read in `zone`: the second
        instant of a wall time the zone repeats is the run of the first (first_occurrence)."""
        if zone is None:
            return self
        first = first_occurrence(self.schedule_time, zone)
        return self if first == self.schedule_time else replace(self, schedule_time=first)

    @property
    def schedule_time_rfc3339(self) -> str:
        """Canonical UTC form, so '05:00:00-07:00' and '12:00:00Z' name the same run."""
        return format_rfc3339(self.schedule_time)

    @property
    def run_id(self) -> str:
        """SHA-256 of the canonical tuple: fixed length, evenly spread document ids, no user
        text in a document path. JSON encoding keeps the fields from bleeding into each other.
        A scheduled run's tuple has no trigger (its id is what it always was, and what the
        audit computes); any other run's has one more member, so it is never the scheduled
        run's id."""
        fields = [self.project, self.location, self.key_name, self.schedule_time_rfc3339]
        if self.trigger is not Trigger.SCHEDULED:
            fields.append(self.trigger.value)
        return hashlib.sha256(_CANONICAL_JSON.encode(fields).encode()).hexdigest()


def zone_of(name: str | None) -> ZoneInfo | None:
    """The IANA zone `name` names; None for None or a name the zone database does not know."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError):
        return None


def first_occurrence(instant: datetime, zone: ZoneInfo) -> datetime:
    """The instant that first names `instant`'s wall time in `zone`: `instant` itself, except
    in the hour a zone repeats when its clocks go back, where a cron schedule's one wall time
    (02:15) falls on two instants. Cloud Scheduler may fire both; they are one run, so the
    second is that of the first, and its delivery is that run's duplicate or its retry."""
    local = instant.astimezone(zone)
    if not local.fold:
        return instant
    return local.replace(fold=0).astimezone(UTC)


def format_rfc3339(instant: datetime) -> str:
    """The one way this repository writes a time: UTC with 'Z', whole seconds when there is no
    fraction (as Cloud Scheduler writes ScheduleTime), else microseconds.

    Run ids hash this text, so the function, the local scheduler, the bench and the ops CLI
    must all write a schedule time exactly like this; they import it from here.
    """
    text = instant.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return text.replace(".000000Z", "Z")


def parse_rfc3339(value: str) -> datetime:
    """Strict RFC 3339 (an offset is required), normalised to UTC.

    `datetime.fromisoformat` alone would also accept a bare date or a naive time, which would
    silently make the run depend on the server's time zone.
    """
    if not _RFC3339.match(value):
        raise ValueError(f"{value!r} is not an RFC 3339 timestamp (e.g. 2026-10-16T12:00:00Z)")
    # fromisoformat handles at most microseconds; Scheduler sends whole seconds anyway.
    seconds, _, rest = value.partition(".")
    if rest:
        digits = re.match(r"\d+", rest)
        assert digits is not None  # guaranteed by _RFC3339
        value = f"{seconds}.{digits.group()[:6].ljust(6, '0')}{rest[digits.end() :]}"
    parsed = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    try:
        # 9999-12-31T23:59:59-01:00 is valid text but lies past the last UTC datetime.
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value!r} is outside the years 1..9999 once converted to UTC") from None
