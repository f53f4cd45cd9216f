"""Timing violations phrased with the Pulumi config keys a user edits.

infra/timing.py names JobTiming and RetryConfig attributes; a user edits
`<project>:jobs[0].retry.retryCount`. This is the one translation between the two, used by the
stack's settings for both its errors and its advisories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactly_once.config import TIME_LIMIT_MARGIN_SECONDS
from infra import timing
from infra.job_config import (
    RETRY_KEYS,
    WORKFLOWS_CALL_TIMEOUT_SECONDS,
    WORKFLOWS_HANDLER_MODULE,
    WORKFLOWS_TIMEOUT_MARGIN_SECONDS,
    JobSettings,
)
from infra.timing import Violation

if TYPE_CHECKING:
    from infra.settings import StackSettings


def timing_keys(field: str, index: int, own_limit: bool = False) -> tuple[str, ...]:
    """Config keys behind a timing.Violation field; a job's time limit is its own key when the
    job sets one (`own_limit`), else derived from the function timeout."""
    if field.startswith("retry."):
        camel = {attribute: key for key, attribute in RETRY_KEYS.items()}[field.removeprefix("retry.")]
        return (f"jobs[{index}].retry.{camel}",)
    return {
        "schedule": (f"jobs[{index}].schedule",),
        "attempt_deadline_seconds": (f"jobs[{index}].attemptDeadlineSeconds",),
        "function_timeout_seconds": ("functionTimeoutSeconds",),
        "time_limit_seconds": (f"jobs[{index}].timeLimitSeconds",)
        if own_limit
        else ("functionTimeoutSeconds",),
        "lease_seconds": ("leaseSeconds",),
        "retention_seconds": ("retentionSeconds",),
    }[field]


def violation_text(violation: Violation, index: int, job: JobSettings, settings: StackSettings) -> str:
    own_limit = job.time_limit_seconds is not None
    keys = dict.fromkeys(key for field in violation.fields for key in timing_keys(field, index, own_limit))
    return f"{', '.join(settings.config_key(key) for key in keys)}: job {job.name!r}: {violation.message}"


def number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def timing_errors(settings: StackSettings) -> list[str]:
    """Every job's non-advisory timing violations, each once."""
    return list(
        dict.fromkeys(
            violation_text(violation, index, job, settings)
            for index, job in enumerate(settings.jobs)
            for violation in timing.check_job_timing(settings.job_timing(job))
            if not violation.advisory
        )
    )


def timing_advisories(settings: StackSettings) -> list[str]:
    """Every job's advisory findings: its own timing, its overlap policy, its Workflows calls."""
    advisories = [
        violation_text(violation, index, job, settings)
        for index, job in enumerate(settings.jobs)
        for violation in timing.check_job_timing(settings.job_timing(job))
        if violation.advisory
    ]
    advisories.extend(
        violation_text(violation, index, job, settings)
        for index, job in enumerate(settings.jobs)
        if job.overlap == "wait"
        for violation in timing.check_wait_overlap(settings.job_timing(job))
    )
    minimum = WORKFLOWS_CALL_TIMEOUT_SECONDS + WORKFLOWS_TIMEOUT_MARGIN_SECONDS
    for index, job in enumerate(settings.jobs):
        own_timeout = settings.job_time_limit(job) + TIME_LIMIT_MARGIN_SECONDS
        if settings.handler_of(job).split(":")[0] != WORKFLOWS_HANDLER_MODULE or own_timeout >= minimum:
            continue
        # Advisory, not an error: nothing is lost or doubled (the attempt is ended at its time
        # limit, a retry takes the run over once the lease ends, the workflow's token check
        # stops a second state change), but a slow CreateExecution is cut off.
        keys = timing_keys("time_limit_seconds", index, job.time_limit_seconds is not None)
        advisories.append(
            f"{', '.join(settings.config_key(key) for key in keys)}: job {job.name!r}: "
            f"{number_text(own_timeout)}s is shorter than the Workflows call timeout "
            f"{number_text(WORKFLOWS_CALL_TIMEOUT_SECONDS)}s + "
            f"{number_text(WORKFLOWS_TIMEOUT_MARGIN_SECONDS)}s: "
            "Cloud Run may stop a slow CreateExecution mid-call and leave the run to a retry; "
            f"set at least {number_text(minimum)}"
        )
    return advisories
