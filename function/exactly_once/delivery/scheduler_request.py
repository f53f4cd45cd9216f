"""Identify a scheduled run from the headers Cloud Scheduler sends.

Cloud Scheduler keeps X-CloudScheduler-ScheduleTime constant across the retries of one run,
so (project, location, job name, schedule time) names the run. Project and location come from
headers the stack sets itself, because the same JOB_ID can exist in two projects or regions.

A run forced by hand (`gcloud scheduler jobs run`, the console's "force run") carries the
*next* scheduled run's time in the same header. Whether a delivery is that forced run or the
scheduled one is decided on Firestore's clock once the delivery has claimed
(delivery/forced_runs.py); the key only carries the verdict, as its `trigger`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum

from exactly_once.delivery.request_checks import header_value

JOB_NAME_HEADER = "X-CloudScheduler-JobName"
SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
PROJECT_HEADER = "X-Job-Project"
LOCATION_HEADER = "X-Job-Location"

# Cloud Scheduler job ids are at most 500 characters; longer values are not from Scheduler.
MAX_HEADER_VALUE_LENGTH = 500
# What a Cloud Scheduler job id may hold. A comma cannot be part of one: servers join repeated
# headers with ", ", so two job-name headers would otherwise name a third job.
_JOB_ID = re.compile(r"^[A-Za-z0-9_-]+$")
# Project ids (with an optional "domain:" prefix) and region names: no commas, no spaces.
_PROJECT_OR_LOCATION = re.compile(r"^[A-Za-z0-9._:-]*$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$")


class BadSchedulerRequest(ValueError):
    """The request does not identify a scheduled run; `header` names the culprit."""

    def __init__(self, header: str, problem: str) -> None:
        super().__init__(f"{header}: {problem}")
        self.header = header


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
    job_name: str
    schedule_time: datetime  # UTC
    trigger: Trigger = Trigger.SCHEDULED

    @property
    def forced(self) -> bool:
        return self.trigger is Trigger.FORCED

    def as_triggered(self, trigger: Trigger) -> RunKey:
        """The same delivery read as `trigger`'s run."""
        return replace(self, trigger=trigger)

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
        fields = [self.project, self.location, self.job_name, self.schedule_time_rfc3339]
        if self.trigger is not Trigger.SCHEDULED:
            fields.append(self.trigger.value)
        canonical = json.dumps(fields, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


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


def run_key_from_headers(headers: Mapping[str, str]) -> RunKey:
    """Read the run's identity, looking headers up case-insensitively: HTTP/2 (Cloud Run)
    lower-cases them and HTTP/1.1 proxies may re-case them."""

    def header(name: str, *, required: bool) -> str:
        value = (header_value(headers, name) or "").strip()
        if required and not value:
            raise BadSchedulerRequest(name, "missing; is the job a Cloud Scheduler unix-cron job?")
        if len(value) > MAX_HEADER_VALUE_LENGTH:
            raise BadSchedulerRequest(name, f"longer than {MAX_HEADER_VALUE_LENGTH} characters")
        return value

    def checked(name: str, pattern: re.Pattern[str], what: str, *, required: bool) -> str:
        value = header(name, required=required)
        if not pattern.match(value):
            raise BadSchedulerRequest(name, f"{value[:80]!r} is not {what} (a repeated header?)")
        return value

    job_name = checked(JOB_NAME_HEADER, _JOB_ID, "a Cloud Scheduler job id", required=True)
    schedule_text = header(SCHEDULE_TIME_HEADER, required=True)
    try:
        schedule_time = parse_rfc3339(schedule_text)
    except ValueError as error:
        raise BadSchedulerRequest(SCHEDULE_TIME_HEADER, str(error)) from None
    return RunKey(
        project=checked(PROJECT_HEADER, _PROJECT_OR_LOCATION, "a project id", required=False),
        location=checked(LOCATION_HEADER, _PROJECT_OR_LOCATION, "a location", required=False),
        job_name=job_name,
        schedule_time=schedule_time,
    )
