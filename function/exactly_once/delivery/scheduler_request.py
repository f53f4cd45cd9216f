"""Identify a scheduled run from the headers Cloud Scheduler sends.

Cloud Scheduler keeps X-CloudScheduler-ScheduleTime constant across the retries of one run,
so (project, location, job name, schedule time) names the run. Project and location come from
headers the stack sets itself, because the same JOB_ID can exist in two projects or regions.

A run forced by hand (`gcloud scheduler jobs run`, the console's "force run") carries the
*next* scheduled run's time in the same header. Whether a delivery is that forced run or the
scheduled one is decided on Firestore's clock once the delivery has claimed
(delivery/forced_runs.py); the key only carries the verdict, as its `trigger`.

A job the job table gives a `run_key` (its runKey in the stack config) is keyed by that instead
of its job id, so a renamed Scheduler job keeps its runs; a job the table does not name (and
every job of a deployment without a table) is keyed by its job id, as it always was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from exactly_once.delivery.request_checks import header_value
from exactly_once.run_key import JOB_ID_PATTERN, RunKey, Trigger, format_rfc3339, parse_rfc3339

JOB_NAME_HEADER = "X-CloudScheduler-JobName"
SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
PROJECT_HEADER = "X-Job-Project"
LOCATION_HEADER = "X-Job-Location"

# Cloud Scheduler job ids are at most 500 characters; longer values are not from Scheduler.
MAX_HEADER_VALUE_LENGTH = 500
# Project ids (with an optional "domain:" prefix) and region names: no commas, no spaces.
_PROJECT_OR_LOCATION = re.compile(r"^[A-Za-z0-9._:-]*$")


class BadSchedulerRequest(ValueError):
    """The request does not identify a scheduled run; `header` names the culprit."""

    def __init__(self, header: str, problem: str) -> None:
        super().__init__(f"{header}: {problem}")
        self.header = header


def run_key_from_headers(headers: Mapping[str, str], run_keys: Mapping[str, str] | None = None) -> RunKey:
    """Read the run's identity, looking headers up case-insensitively: HTTP/2 (Cloud Run)
    lower-cases them and HTTP/1.1 proxies may re-case them. `run_keys` maps a job id to the
    run key its runs are keyed by (the job table's `run_key`s); a job it leaves out is keyed
    by its job id."""

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

    job_name = checked(JOB_NAME_HEADER, JOB_ID_PATTERN, "a Cloud Scheduler job id", required=True)
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
        run_key=(run_keys or {}).get(job_name),
    )


# The run's identity is run_key.py's; the tools outside the function that read headers
# (ops, localrun, bench) find it here beside the header names.
__all__ = [
    "JOB_NAME_HEADER",
    "LOCATION_HEADER",
    "MAX_HEADER_VALUE_LENGTH",
    "PROJECT_HEADER",
    "SCHEDULE_TIME_HEADER",
    "BadSchedulerRequest",
    "RunKey",
    "Trigger",
    "format_rfc3339",
    "parse_rfc3339",
    "run_key_from_headers",
]
