"""The scheduled audit's configuration (AUDIT_JOBS): the facts it needs about each job.

Standard library only: the Pulumi program writes this configuration (infra/plan/audit_job.py)
and must not need the function's run-time packages to do so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from exactly_once.delivery.scheduler_request import format_rfc3339, parse_rfc3339

# The function's environment variable that carries AuditConfig.to_json(): written by the stack,
# read by the audit job at start-up.
AUDIT_JOBS_ENV = "AUDIT_JOBS"


class AuditError(ValueError):
    """An audit that cannot be computed as asked (bad schedule, zone, window or config)."""


@dataclass(frozen=True)
class AuditedJob:
    """What the audit needs to know about one scheduled job."""

    name: str  # as Cloud Scheduler sends it in X-CloudScheduler-JobName
    schedule: str
    time_zone: str
    # From the scheduled time to when the last retry can have ended.
    retry_window_seconds: float
    # When the job was deployed: runs scheduled earlier were never due, so never missed.
    not_before: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "name": self.name,
            "schedule": self.schedule,
            "time_zone": self.time_zone,
            "retry_window_seconds": self.retry_window_seconds,
        }
        if self.not_before is not None:
            fields["not_before"] = format_rfc3339(self.not_before)
        return fields


@dataclass(frozen=True)
class AuditConfig:
    """The scheduled audit's configuration (the AUDIT_JOBS environment variable)."""

    jobs: tuple[AuditedJob, ...]
    # How far back each audit run looks: the audit's own schedule period, so that
    # consecutive runs cover time without gaps or overlaps.
    interval_seconds: float

    def to_json(self) -> str:
        return json.dumps(
            {"interval_seconds": self.interval_seconds, "jobs": [job.to_json() for job in self.jobs]},
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> AuditConfig:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise AuditError(f"not JSON ({error.msg})") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("jobs"), list):
            raise AuditError('expected {"interval_seconds": <seconds>, "jobs": [...]}')
        interval = _positive_number(raw.get("interval_seconds"), "interval_seconds")
        jobs = tuple(_audited_job(item, index) for index, item in enumerate(raw["jobs"]))
        return cls(jobs=jobs, interval_seconds=interval)


def _audited_job(item: Any, index: int) -> AuditedJob:
    if not isinstance(item, dict):
        raise AuditError(f"jobs[{index}]: expected an object")
    unknown = sorted(set(item) - {"name", "schedule", "time_zone", "retry_window_seconds", "not_before"})
    if unknown:
        raise AuditError(f"jobs[{index}]: unknown fields {unknown}")
    for key in ("name", "schedule", "time_zone"):
        if not isinstance(item.get(key), str) or not item[key]:
            raise AuditError(f"jobs[{index}].{key}: expected a non-empty string")
    not_before = item.get("not_before")
    if not_before is not None:
        try:
            not_before = parse_rfc3339(not_before) if isinstance(not_before, str) else None
        except ValueError:
            not_before = None
        if not_before is None:
            raise AuditError(
                f"jobs[{index}].not_before: expected an RFC 3339 time, got {item['not_before']!r}"
            )
    return AuditedJob(
        name=item["name"],
        schedule=item["schedule"],
        time_zone=item["time_zone"],
        retry_window_seconds=_positive_number(
            item.get("retry_window_seconds"), f"jobs[{index}].retry_window_seconds"
        ),
        not_before=not_before,
    )


def _positive_number(value: Any, key: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise AuditError(f"{key}: expected a positive number of seconds, got {value!r}")
    return float(value)
