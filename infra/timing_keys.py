"""Timing violations phrased with the Pulumi config keys a user edits.

infra/timing.py names JobTiming and RetryConfig attributes; a user edits
`<project>:jobs[0].retry.retryCount`. This is the one translation between the two, used by the
stack's settings for both its errors and its advisories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.job_config import RETRY_KEYS, JobSettings
from infra.timing import Violation

if TYPE_CHECKING:
    from infra.settings import StackSettings


def timing_keys(field: str, index: int) -> tuple[str, ...]:
    """Config keys behind a timing.Violation field."""
    if field.startswith("retry."):
        camel = {attribute: key for key, attribute in RETRY_KEYS.items()}[field.removeprefix("retry.")]
        return (f"jobs[{index}].retry.{camel}",)
    return {
        "schedule": (f"jobs[{index}].schedule",),
        "attempt_deadline_seconds": (f"jobs[{index}].attemptDeadlineSeconds",),
        "function_timeout_seconds": ("functionTimeoutSeconds",),
        "lease_seconds": ("leaseSeconds",),
        "retention_seconds": ("retentionSeconds",),
    }[field]


def violation_text(violation: Violation, index: int, job: JobSettings, settings: StackSettings) -> str:
    keys = dict.fromkeys(key for field in violation.fields for key in timing_keys(field, index))
    return f"{', '.join(settings.config_key(key) for key in keys)}: job {job.name!r}: {violation.message}"


def number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
