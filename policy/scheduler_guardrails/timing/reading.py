"""Reading a Scheduler job and its function into the timing the stack's rules judge.

The timing rules are rules/timing/rules.py's, the same the stack validates its settings with;
this module only reads their inputs from the engine's properties: the job's deadline, retries
and time zone, the function's timeout, and the lease, time limit and retention the function
reads from its environment (by the names `exactly_once.config` gives them), and the job's own
time limit and starting deadline from the job table the function ships (engine/job_table.py).
A left-out property takes the service's or the function's default; an input unknown in preview
skips the job. A table the pack cannot read (a first preview's, whose archive is not known yet)
does not: the job is judged on everything else, with the values the table would give
(TABLE_FIELDS) named as unread, so the rules that read them are left for the update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pulumi_policy import PolicyResource

from exactly_once.config import (
    DEFAULT_FUNCTION_TIMEOUT_SECONDS,
    LEASE_SECONDS_ENV,
    RETENTION_SECONDS_ENV,
    TIME_LIMIT_ENV,
    JobPolicy,
)

from ..engine.env import function_env
from ..engine.job_table import job_policy, job_table_of
from ..engine.props import MISSING, UNKNOWN, Absent, as_number, lookup, parse_duration_seconds
from ..rules.timing import rules as timing
from ..rules.timing.cron import DEFAULT_TIME_ZONE
from .pairing import function_for

# Cloud Scheduler's attempt deadline for HTTP targets when a job leaves it out.
DEFAULT_ATTEMPT_DEADLINE_SECONDS: Final = 180.0
# The JobTiming fields a job's entry in the job table gives: its own time limit and starting
# deadline. Without the table, neither is known.
TABLE_FIELDS: Final = ("time_limit_seconds", "starting_deadline_seconds")


@dataclass(frozen=True)
class JobPlan:
    """A job paired with its function and the timing read from both, or the reasons it can't be."""

    job: PolicyResource
    function: PolicyResource | None
    timing: timing.JobTiming | None
    problems: tuple[str, ...] = ()
    # JobTiming fields whose values could not be read (the job table's, when it is unknown):
    # `timing` holds the function's defaults in their place, which no rule may be judged on.
    unread: tuple[str, ...] = ()


def _seconds_or_problem(value: Any, default: float, prop: str) -> float | str | Absent:
    """Seconds for a duration property, the default when missing, UNKNOWN, or a problem text."""
    if value is MISSING:
        return default
    if value is UNKNOWN:
        return Absent.UNKNOWN
    seconds: float | None = parse_duration_seconds(value)
    if seconds is None:
        return f"property {prop} {value!r} is not a duration; write it like '10s'"
    return seconds


def plan_job(
    job: PolicyResource, functions: list[PolicyResource], resources: list[PolicyResource]
) -> JobPlan | None:
    """Build JobTiming for one job, or None when something it needs is unknown in preview (but
    the job table: see JobPlan.unread). `resources`: the stack's, where the function's source
    object (and its job table) is."""
    function = function_for(job, functions)
    if function is None:
        return JobPlan(job, None, None)
    props = job.props
    problems: list[str] = []
    values: dict[str, float] = {}

    deadline = lookup(props, "attemptDeadline")
    if deadline is UNKNOWN:
        return None
    deadline_seconds = (
        DEFAULT_ATTEMPT_DEADLINE_SECONDS if deadline is MISSING else parse_duration_seconds(deadline)
    )
    if deadline_seconds is None:
        return None  # not a duration: reported by scheduler-job-schedule-and-deadline
    values["attempt_deadline_seconds"] = deadline_seconds

    retry_props = lookup(props, "retryConfig")
    if retry_props is UNKNOWN:
        return None
    defaults = timing.RetryConfig()
    for key, prop, default in (
        ("min_backoff_seconds", "minBackoffDuration", defaults.min_backoff_seconds),
        ("max_backoff_seconds", "maxBackoffDuration", defaults.max_backoff_seconds),
        ("max_retry_duration_seconds", "maxRetryDuration", defaults.max_retry_duration_seconds),
    ):
        result = _seconds_or_problem(lookup(retry_props, prop), default, f"retryConfig.{prop}")
        if result is UNKNOWN:
            return None
        if isinstance(result, str):
            problems.append(result)
        elif isinstance(result, float):
            values[key] = result
    counts: dict[str, int] = {}
    for key, prop, int_default in (
        ("retry_count", "retryCount", defaults.retry_count),
        ("max_doublings", "maxDoublings", defaults.max_doublings),
    ):
        raw = lookup(retry_props, prop)
        if raw is UNKNOWN:
            return None
        number = float(int_default) if raw is MISSING else as_number(raw)
        if number is None or number != int(number):
            problems.append(f"property retryConfig.{prop} {raw!r} is not a whole number")
        else:
            counts[key] = int(number)

    service = lookup(function.props, "serviceConfig")
    if service is UNKNOWN:
        return None
    timeout = lookup(service, "timeoutSeconds")
    if timeout is UNKNOWN:
        return None
    timeout_seconds = DEFAULT_FUNCTION_TIMEOUT_SECONDS if timeout is MISSING else as_number(timeout)
    if timeout_seconds is None:
        problems.append(f"function property serviceConfig.timeoutSeconds {timeout!r} is not a number")
    for key, variable in (
        ("lease_seconds", LEASE_SECONDS_ENV),
        ("time_limit_seconds", TIME_LIMIT_ENV),
        ("retention_seconds", RETENTION_SECONDS_ENV),
    ):
        raw = function_env(function, variable)
        if raw is UNKNOWN:
            return None
        number = None if raw is MISSING else as_number(raw)
        if number is None:
            shown = "is not set" if raw is MISSING else f"{raw!r} is not a number of seconds"
            problems.append(
                f"function property serviceConfig.environmentVariables.{variable} {shown}; set it explicitly "
                "so the timing can be checked"
            )
        else:
            values[key] = number

    own = job_policy(job_table_of(function, resources), lookup(props, "name"))
    unread = TABLE_FIELDS if own is UNKNOWN else ()
    if isinstance(own, str):
        problems.append(own)
    starting_deadline = None
    if isinstance(own, JobPolicy):
        if own.time_limit_seconds is not None:
            values["time_limit_seconds"] = own.time_limit_seconds
        starting_deadline = own.starting_deadline_seconds

    time_zone = lookup(props, "timeZone")
    if time_zone is UNKNOWN:
        return None
    if problems or timeout_seconds is None:
        return JobPlan(job, function, None, tuple(problems), unread)
    schedule = lookup(props, "schedule")
    job_timing = timing.JobTiming(
        schedule=schedule if isinstance(schedule, str) else "",
        attempt_deadline_seconds=values["attempt_deadline_seconds"],
        function_timeout_seconds=timeout_seconds,
        lease_seconds=values["lease_seconds"],
        retention_seconds=values["retention_seconds"],
        time_limit_seconds=values["time_limit_seconds"],
        starting_deadline_seconds=starting_deadline,
        # Left out, Cloud Scheduler reads the schedule in UTC, as the rules do.
        time_zone=time_zone if isinstance(time_zone, str) else DEFAULT_TIME_ZONE,
        retry=timing.RetryConfig(
            retry_count=counts["retry_count"],
            max_retry_duration_seconds=values["max_retry_duration_seconds"],
            min_backoff_seconds=values["min_backoff_seconds"],
            max_backoff_seconds=values["max_backoff_seconds"],
            max_doublings=counts["max_doublings"],
        ),
    )
    return JobPlan(job, function, job_timing, unread=unread)
