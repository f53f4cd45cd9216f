"""The scheduled audit's configuration (the job table's `audit`): the facts it needs about each job.

Standard library only: the Pulumi program writes this configuration (infra/plan/audit_job.py)
and must not need the function's run-time packages to do so.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from exactly_once.run_key import format_rfc3339, parse_rfc3339

# The job table's key (exactly_once.config.JobTable) that carries AuditConfig.to_json():
# written by the stack, read by the audit job at start-up.
AUDIT_TABLE_KEY = "audit"
# The most runs of one job a catch-up window may hold (a week of a job every minute). Every
# audit run reads the record of each run in every job's window, so the stack's config refuses a
# wider window; an audit given one anyway (a configuration written by hand) walks only the
# newest this many, and says so, rather than fail.
MAX_CATCHUP_WINDOW_RUNS = 10_080
# The region a function of the stack serves in, set by a stack deployed in two regions: each
# region's audit sends its catch-up deliveries through its own region's queue to its own
# region's function (AuditConfig.redelivery_for), so that either region catches up alone.
REGION_ENV = "SERVING_REGION"


class AuditError(ValueError):
    """An audit that cannot be computed as asked (bad schedule, zone, window or config)."""


class CatchupRuns(StrEnum):
    """Which of a job's missed runs inside its catch-up window the audit delivers again."""

    LATEST = "latest"  # the newest run only, and only when no later run is recorded
    ALL = "all"  # every one, oldest first


@dataclass(frozen=True)
class Catchup:
    """A job's catch-up policy (the job key `catchup`): how far back the audit re-delivers
    runs nobody delivered, and which of them."""

    window_seconds: float
    runs: CatchupRuns

    def to_json(self) -> dict[str, Any]:
        return {"window_seconds": self.window_seconds, "runs": self.runs.value}


@dataclass(frozen=True)
class Delivery:
    """What a catch-up delivery of a job sends besides its schedule time: the headers Cloud
    Scheduler sends (all but X-CloudScheduler-ScheduleTime, which is the run's own) and the
    body, so the re-delivered run has the run id and the input of the lost one."""

    headers: Mapping[str, str]
    body: bytes = b""
    # How long a delivery waits for the function: the job's attempt deadline, as Scheduler's.
    deadline_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "headers": dict(sorted(self.headers.items())),
            "body": base64.b64encode(self.body).decode(),
        }
        if self.deadline_seconds is not None:
            fields["deadline_seconds"] = self.deadline_seconds
        return fields


@dataclass(frozen=True)
class AuditedJob:
    """What the audit needs to know about one scheduled job."""

    # What the job's runs are keyed by (exactly_once.run_key): its Cloud Scheduler job id, as
    # sent in X-CloudScheduler-JobName, or the run key the job table gives it. Run ids, the
    # pause history and the audit's findings name the job by it; a catch-up delivery still
    # carries the Scheduler job's own headers (`delivery`), which the function maps back.
    name: str
    schedule: str
    time_zone: str
    # From the scheduled time to when the last retry can have ended.
    retry_window_seconds: float
    # When the job was deployed: runs scheduled earlier were never due, so never missed.
    not_before: datetime | None = None
    # The stack pauses the job (`paused: true`): its runs without a record were skipped on
    # purpose, not missed.
    paused: bool = False
    # When the stack last paused or resumed the job (audit/pauses.py); None: not recorded.
    pause_changed_at: datetime | None = None
    # The job's catch-up policy, and what a catch-up delivery sends (both or neither).
    catchup: Catchup | None = None
    delivery: Delivery | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "name": self.name,
            "schedule": self.schedule,
            "time_zone": self.time_zone,
            "retry_window_seconds": self.retry_window_seconds,
        }
        if self.not_before is not None:
            fields["not_before"] = format_rfc3339(self.not_before)
        if self.paused:
            fields["paused"] = True
        if self.pause_changed_at is not None:
            fields["pause_changed_at"] = format_rfc3339(self.pause_changed_at)
        if self.catchup is not None:
            fields["catchup"] = self.catchup.to_json()
        if self.delivery is not None:
            fields["delivery"] = self.delivery.to_json()
        return fields


@dataclass(frozen=True)
class Redelivery:
    """Where catch-up deliveries go. With a `queue`, each is a Cloud Tasks task on it: an HTTP
    request to `url` with an OIDC token of `invoker` (the account Cloud Scheduler signs with),
    which Cloud Run counts as internal traffic. Without one, `url` must be a loopback address
    (a local stack, the tests), and the audit posts to it itself."""

    url: str
    queue: str | None = None
    invoker: str | None = None
    # The region whose function sends through it; None: every function of the stack (one region).
    region: str | None = None

    def to_json(self) -> dict[str, Any]:
        fields = {"url": self.url, "queue": self.queue, "invoker": self.invoker, "region": self.region}
        return {key: value for key, value in fields.items() if value is not None}


@dataclass(frozen=True)
class AuditConfig:
    """The scheduled audit's configuration (the job table's `audit` object)."""

    jobs: tuple[AuditedJob, ...]
    # How far back each audit run looks: the audit's own schedule period, so that
    # consecutive runs cover time without gaps or overlaps.
    interval_seconds: float
    # Where catch-up deliveries go: one for every region, or one per region, each naming its
    # region (a queue is regional, and a region that is down must not take the other's
    # catch-up with it). Empty: no job has a catch-up policy.
    redeliveries: tuple[Redelivery, ...] = ()

    def __post_init__(self) -> None:
        regions = [redelivery.region for redelivery in self.redeliveries]
        if len(regions) > 1 and None in regions:
            raise AuditError("redelivery: with more than one, each names its region")
        if len(set(regions)) != len(regions):
            raise AuditError(f"redelivery: a region named twice in {regions}")

    def to_json(self) -> str:
        fields: dict[str, Any] = {
            "interval_seconds": self.interval_seconds,
            "jobs": [job.to_json() for job in self.jobs],
        }
        if self.redeliveries:
            # One region's stack writes the one object it always wrote.
            items = [redelivery.to_json() for redelivery in self.redeliveries]
            fields["redelivery"] = items[0] if self.redeliveries[0].region is None else items
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    def redelivery_for(self, region: str | None) -> Redelivery | None:
        """The redelivery the function serving in `region` (REGION_ENV; None: not set) sends
        through; None when no job catches up. A per-region configuration that does not name
        `region` is refused, naming both: the function must not send through another region's
        queue, which may be the one that is down."""
        if not self.redeliveries or self.redeliveries[0].region is None:
            return self.redeliveries[0] if self.redeliveries else None
        named = {redelivery.region: redelivery for redelivery in self.redeliveries}
        if region not in named:
            raise AuditError(
                f"redelivery names the regions {', '.join(sorted(str(name) for name in named))}, "
                f"not this function's ({REGION_ENV}={region!r})"
            )
        return named[region]

    @classmethod
    def from_json(cls, text: str) -> AuditConfig:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise AuditError(f"not JSON ({error.msg})") from None
        return cls.from_raw(raw)

    @classmethod
    def from_raw(cls, raw: Any) -> AuditConfig:
        """From the parsed JSON object, as the job table holds it."""
        if not isinstance(raw, dict) or not isinstance(raw.get("jobs"), list):
            raise AuditError('expected {"interval_seconds": <seconds>, "jobs": [...]}')
        interval = _positive_number(raw.get("interval_seconds"), "interval_seconds")
        jobs = tuple(_audited_job(item, index) for index, item in enumerate(raw["jobs"]))
        redeliveries = _redeliveries(raw.get("redelivery"))
        if not redeliveries and any(job.catchup is not None for job in jobs):
            raise AuditError("redelivery: a job has a catch-up policy, but nothing says where to deliver")
        return cls(jobs=jobs, interval_seconds=interval, redeliveries=redeliveries)


def _redeliveries(raw: Any) -> tuple[Redelivery, ...]:
    """One object (every region's), or a non-empty list of them, one per region."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        return (_redelivery(raw, "redelivery"),)
    if not raw:
        raise AuditError("redelivery: expected one object, or a list of one per region")
    found = tuple(_redelivery(item, f"redelivery[{index}]") for index, item in enumerate(raw))
    for index, redelivery in enumerate(found):
        if redelivery.region is None:
            raise AuditError(f"redelivery[{index}].region: missing (a list has one per region)")
    return found


def _redelivery(raw: Any, where: str) -> Redelivery:
    keys = ("url", "queue", "invoker", "region")
    if not isinstance(raw, dict) or sorted(set(raw) - set(keys)):
        raise AuditError(f'{where}: expected {{"url", "queue"?, "invoker"?, "region"?}}')
    for key in keys:
        if key in raw and (not isinstance(raw[key], str) or not raw[key]):
            raise AuditError(f"{where}.{key}: expected a non-empty string")
    if "url" not in raw:
        raise AuditError(f"{where}.url: missing")
    if ("queue" in raw) != ("invoker" in raw):
        raise AuditError(
            f"{where}: a queue needs the invoker account its tasks sign as, and only a queue does"
        )
    return Redelivery(
        url=raw["url"], queue=raw.get("queue"), invoker=raw.get("invoker"), region=raw.get("region")
    )


def _catchup(raw: Any, where: str) -> Catchup:
    if not isinstance(raw, dict) or sorted(set(raw) - {"window_seconds", "runs"}):
        raise AuditError(f'{where}: expected {{"window_seconds", "runs"}}')
    runs = raw.get("runs")
    if runs not in tuple(CatchupRuns):
        raise AuditError(f"{where}.runs: expected one of {', '.join(CatchupRuns)}, got {runs!r}")
    return Catchup(_positive_number(raw.get("window_seconds"), f"{where}.window_seconds"), CatchupRuns(runs))


def _delivery(raw: Any, where: str) -> Delivery:
    if not isinstance(raw, dict) or not isinstance(raw.get("headers"), dict):
        raise AuditError(f'{where}: expected {{"headers": {{...}}, "body": <base64>}}')
    headers = raw["headers"]
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in headers.items()):
        raise AuditError(f"{where}.headers: expected string names and values")
    try:
        body = base64.b64decode(raw.get("body", ""), validate=True)
    except (binascii.Error, TypeError):
        raise AuditError(f"{where}.body: expected base64") from None
    deadline = raw.get("deadline_seconds")
    if deadline is not None:
        deadline = _positive_number(deadline, f"{where}.deadline_seconds")
    return Delivery(headers=dict(headers), body=body, deadline_seconds=deadline)


def _audited_job(item: Any, index: int) -> AuditedJob:
    if not isinstance(item, dict):
        raise AuditError(f"jobs[{index}]: expected an object")
    known = {
        "name",
        "schedule",
        "time_zone",
        "retry_window_seconds",
        "not_before",
        "paused",
        "pause_changed_at",
        "catchup",
        "delivery",
    }
    unknown = sorted(set(item) - known)
    if unknown:
        raise AuditError(f"jobs[{index}]: unknown fields {unknown}")
    for key in ("name", "schedule", "time_zone"):
        if not isinstance(item.get(key), str) or not item[key]:
            raise AuditError(f"jobs[{index}].{key}: expected a non-empty string")
    not_before = _optional_time(item, "not_before", index)
    pause_changed_at = _optional_time(item, "pause_changed_at", index)
    paused = item.get("paused", False)
    if not isinstance(paused, bool):
        raise AuditError(f"jobs[{index}].paused: expected true or false, got {paused!r}")
    catchup = _catchup(item["catchup"], f"jobs[{index}].catchup") if "catchup" in item else None
    delivery = _delivery(item["delivery"], f"jobs[{index}].delivery") if "delivery" in item else None
    if catchup is not None and delivery is None:
        raise AuditError(f"jobs[{index}].delivery: a job with a catch-up policy needs what to deliver")
    return AuditedJob(
        name=item["name"],
        schedule=item["schedule"],
        time_zone=item["time_zone"],
        retry_window_seconds=_positive_number(
            item.get("retry_window_seconds"), f"jobs[{index}].retry_window_seconds"
        ),
        not_before=not_before,
        paused=paused,
        pause_changed_at=pause_changed_at,
        catchup=catchup,
        delivery=delivery,
    )


def _optional_time(item: Mapping[str, Any], key: str, index: int) -> datetime | None:
    raw = item.get(key)
    if raw is None:
        return None
    try:
        return parse_rfc3339(raw) if isinstance(raw, str) else _not_a_time(raw, key, index)
    except ValueError:
        return _not_a_time(raw, key, index)


def _not_a_time(raw: Any, key: str, index: int) -> datetime:
    raise AuditError(f"jobs[{index}].{key}: expected an RFC 3339 time, got {raw!r}")


def _positive_number(value: Any, key: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise AuditError(f"{key}: expected a positive number of seconds, got {value!r}")
    return float(value)
