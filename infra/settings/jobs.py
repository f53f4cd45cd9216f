"""The `jobs` list of a stack's config: one Cloud Scheduler job each, validated key by key.

Every error names the config key to edit (`<project>:jobs[1].retry.retryCount`). Kept apart
from infra/settings/stack.py, which turns the validated jobs into the stack's settings.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from exactly_once.audit.config import Catchup, CatchupRuns
from exactly_once.config import HANDLER_PATTERN, TIME_LIMIT_MARGIN_SECONDS, OverlapPolicy
from infra.config.schema import JOBS_KEY
from policy.scheduler_guardrails.rules.config.access import ACCESS_KEYS, JobAccess, parse_access
from policy.scheduler_guardrails.rules.config.handlers import malformed_handler
from policy.scheduler_guardrails.rules.config.problems import ConfigProblems, unknown_keys
from policy.scheduler_guardrails.rules.targets.registry import (
    TARGET_KEYS,
    check_target_job,
    kind_of,
    parse_target,
)
from policy.scheduler_guardrails.rules.timing.cron import DEFAULT_TIME_ZONE
from policy.scheduler_guardrails.rules.timing.rules import RetryConfig

# The stack's own missed-run audit job (infra/plan/audit_job.py): no configured job may take its name.
AUDIT_JOB_NAME = "missed-run-audit"

# A retry policy that survives a crashed attempt with the default 30 s lease: instant failures
# retry at 15, 45, 105, 225, 465 s, the 45 s one and every later one after the lease has ended,
# so a crashed run is taken over within 45 s.
DEFAULT_RETRY = RetryConfig(
    retry_count=5,
    max_retry_duration_seconds=0.0,
    min_backoff_seconds=15.0,
    max_backoff_seconds=300.0,
    max_doublings=3,
)

# What a run of a job does while another run of the same job still holds its lease:
# `allow` runs anyway, `skip` records the run as skipped, `wait` answers 409 until the other
# run has finished (Cloud Scheduler's retries bring it back).
OVERLAP_POLICIES: tuple[OverlapPolicy, ...] = tuple(OverlapPolicy)
DEFAULT_OVERLAP = OverlapPolicy.ALLOW

_JOB_KEYS = (
    "name",
    "runKey",
    "schedule",
    "timeZone",
    "attemptDeadlineSeconds",
    "timeLimitSeconds",
    "retry",
    "body",
    "handler",
    "overlap",
    "startingDeadlineSeconds",
    "paused",
    "catchup",
    "pauseAfterFailures",
    # What the job starts per run (policy/scheduler_guardrails/rules/targets/), and what it needs
    # (policy/scheduler_guardrails/rules/config/access.py).
    *TARGET_KEYS,
    *ACCESS_KEYS,
)
RETRY_KEYS = {
    "retryCount": "retry_count",
    "maxRetryDurationSeconds": "max_retry_duration_seconds",
    "minBackoffSeconds": "min_backoff_seconds",
    "maxBackoffSeconds": "max_backoff_seconds",
    "maxDoublings": "max_doublings",
}
_INTEGER_RETRY_FIELDS = {"retry_count", "max_doublings"}
CATCHUP_KEYS = ("windowSeconds", "runs")
# Every missed run inside the window executes once, unless the job asks for the latest only.
DEFAULT_CATCHUP_RUNS = CatchupRuns.ALL

_JOB_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_NAME_RULE = "1-100 of A-Z, a-z, 0-9, '-', '_'"


@dataclass(frozen=True)
class JobSettings:
    """One Cloud Scheduler job of the stack."""

    name: str
    schedule: str
    time_zone: str
    attempt_deadline_seconds: float
    retry: RetryConfig
    # How long one attempt's job may run (timeLimitSeconds); None: the function's whole limit.
    time_limit_seconds: float | None = None
    body: Mapping[str, Any] | None = None
    handler: str | None = None
    overlap: OverlapPolicy = DEFAULT_OVERLAP
    # A run delivered later than this after its ScheduleTime is skipped (startingDeadlineSeconds,
    # the function's job table); None: never.
    starting_deadline_seconds: float | None = None
    # What the job starts per run: the value its kind's `parse` made
    # (policy/scheduler_guardrails/rules/targets/).
    target: object | None = None
    access: JobAccess = dataclasses.field(default_factory=JobAccess)
    # `paused: true`: the Scheduler job is paused, and the audit counts its runs as paused.
    paused: bool = False
    # The config sets `paused` (true or false): the stack records when that key last changed,
    # so the audit knows when a pause began and ended (exactly_once/audit/pauses.py).
    pause_recorded: bool = False
    # `catchup`: the missed runs the stack's audit delivers again; None: none.
    catchup: Catchup | None = None
    # `runKey`: what the job's runs, status and audit history are keyed by; None: its name.
    run_key: str | None = None
    # `pauseAfterFailures`: after this many failed runs in a row the function skips the job's
    # runs until one succeeds or `ops resume` (the job table); None: never.
    pause_after_failures: int | None = None

    @property
    def key_name(self) -> str:
        """The name the job's runs are keyed by: its runKey, else its name. A rename that keeps
        it keeps the job's run ids, its status and its audit history."""
        return self.name if self.run_key is None else self.run_key

    @property
    def sample_workflow(self) -> bool:
        """True when the job's body names the sample the stack deploys for it (a sample
        workflow): the body waits for that sample's resource name."""
        return self.target is not None and kind_of(self.target).body_names_sample(self.target)

    def body_bytes(self, sample_workflow: str | None = None) -> bytes | None:
        """The exact request body Cloud Scheduler sends (and the local scheduler replays).

        A job with a sample workflow needs that workflow's resource name, which only the
        Pulumi program knows (`sample_workflow`); without it there is no body to send yet.
        """
        body = self.body
        target = self.target
        if target is not None and kind_of(target).body_names_sample(target):
            body = kind_of(target).sample_body(target, sample_workflow) if sample_workflow else None
        if body is None:
            return None
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _number(value: Any, key: str, errors: ConfigProblems, *, integer: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.append(f"{errors.key(key)}: expected a number, got {value!r}")
        return None
    if integer and value != int(value):
        errors.append(f"{errors.key(key)}: expected a whole number, got {value!r}")
        return None
    return float(value)


def parse_jobs(raw: Any, function_timeout: float, errors: ConfigProblems) -> tuple[JobSettings, ...]:
    if raw is None or raw == []:
        errors.append(f"{errors.key(JOBS_KEY)}: at least one job is required")
        return ()
    if not isinstance(raw, list):
        errors.append(f"{errors.key(JOBS_KEY)}: expected a list of jobs, got {raw!r}")
        return ()
    indexed = [
        (index, job) for index, item in enumerate(raw) if (job := _job(item, index, function_timeout, errors))
    ]
    jobs = [job for _, job in indexed]
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.name in seen:
            errors.append(
                f"{errors.key(f'jobs[{index}].name')}: {job.name!r} is already "
                f"the name of jobs[{seen[job.name]}]"
            )
        seen.setdefault(job.name, index)
    _check_run_keys(indexed, errors)
    return tuple(jobs)


def _check_run_keys(jobs: list[tuple[int, JobSettings]], errors: ConfigProblems) -> None:
    """Each job's runs need a key of their own: two jobs keyed alike would share every run id,
    and one job's run would answer the other's as a duplicate, never running it. A job without
    runKey is keyed by its name, so a runKey may not be another job's name either; nor the
    audit's, which the stack adds as one more job. `jobs` pairs each job with its index."""
    keyed: dict[str, tuple[int, JobSettings]] = {}
    for index, job in jobs:
        if job.run_key == AUDIT_JOB_NAME:
            errors.append(
                f"{errors.key(f'jobs[{index}].runKey')}: {job.run_key!r} is the name of the stack's own "
                "missed-run audit job"
            )
        first = keyed.setdefault(job.key_name, (index, job))
        if first[1] is job or first[1].name == job.name:
            continue
        # Name the runKey to change: this job's, unless only the earlier job set one.
        (at, keyed_by), other = (first, job) if job.run_key is None else ((index, job), first[1])
        if other.run_key is None:
            taken = f"the name of job {other.name!r}, which has no runKey and so is keyed by its name"
        else:
            taken = f"also the runKey of job {other.name!r}"
        errors.append(
            f"{errors.key(f'jobs[{at}].runKey')}: job {keyed_by.name!r} is keyed by {keyed_by.key_name!r}, "
            f"{taken}; two jobs keyed alike would share their run ids: give each a runKey of its own"
        )


def _job(item: Any, index: int, function_timeout: float, errors: ConfigProblems) -> JobSettings | None:
    prefix = f"jobs[{index}]"
    if not isinstance(item, Mapping):
        errors.append(f"{errors.key(prefix)}: expected an object, got {item!r}")
        return None
    before = len(errors)
    name = item.get("name")
    # By the job's name too: a key the checkout no longer knows (a deleted target kind's, say)
    # is found in the stack file by the job it belongs to, not by counting entries.
    unknown_keys(
        item, prefix, _JOB_KEYS, errors, what=f"key of job {name!r}" if isinstance(name, str) else "job key"
    )

    if name is None:
        errors.append(f"{errors.key(f'{prefix}.name')}: name is missing: every job needs one, {_NAME_RULE}")
    elif not isinstance(name, str) or not _JOB_NAME.match(name):
        errors.append(f"{errors.key(f'{prefix}.name')}: {name!r} must be {_NAME_RULE}")
    schedule = item.get("schedule")
    if not isinstance(schedule, str):
        errors.append(f"{errors.key(f'{prefix}.schedule')}: expected a unix-cron string, got {schedule!r}")
    time_zone = item.get("timeZone", DEFAULT_TIME_ZONE)
    if not isinstance(time_zone, str) or not _known_time_zone(time_zone):
        errors.append(f"{errors.key(f'{prefix}.timeZone')}: {time_zone!r} is not an IANA time zone")
    time_limit = _time_limit(item, prefix, errors)
    # Cloud Scheduler waits as long as the job may run: its own limit, else the function's.
    own_timeout = function_timeout if time_limit is None else time_limit + TIME_LIMIT_MARGIN_SECONDS
    deadline = _number(
        item.get("attemptDeadlineSeconds", own_timeout), f"{prefix}.attemptDeadlineSeconds", errors
    )
    retry = _retry(item.get("retry", {}), f"{prefix}.retry", errors)
    body = item.get("body")
    if body is not None and not isinstance(body, Mapping):
        errors.append(f"{errors.key(f'{prefix}.body')}: expected a JSON object, got {body!r}")
    handler = item.get("handler")
    if handler is not None and (not isinstance(handler, str) or not HANDLER_PATTERN.match(handler)):
        errors.append(f"{errors.key(f'{prefix}.handler')}: {malformed_handler(handler)}")
    overlap = item.get("overlap", DEFAULT_OVERLAP)
    if overlap not in OVERLAP_POLICIES:
        errors.append(
            f"{errors.key(f'{prefix}.overlap')}: {overlap!r} is not one of {', '.join(OVERLAP_POLICIES)}"
        )
    starting_deadline = _starting_deadline(item, prefix, errors)
    target = parse_target(item, prefix, errors)
    if target is not None:
        handler = check_target_job(target, handler, body, prefix, errors)
        body = kind_of(target).body(target)
    access = parse_access(item, prefix, errors)
    paused = item.get("paused", False)
    if not isinstance(paused, bool):
        errors.append(f"{errors.key(f'{prefix}.paused')}: expected true or false, got {paused!r}")
    catchup = _catchup(item["catchup"], f"{prefix}.catchup", errors) if "catchup" in item else None
    run_key = item.get("runKey")
    if "runKey" in item and (not isinstance(run_key, str) or not _JOB_NAME.match(run_key)):
        errors.append(f"{errors.key(f'{prefix}.runKey')}: {run_key!r} must be {_NAME_RULE}, as a job name")
    pause_after_failures = _pause_after_failures(item, prefix, name, errors)

    if len(errors) > before or deadline is None or retry is None:
        return None
    return JobSettings(
        name=str(name),
        schedule=str(schedule),
        time_zone=str(time_zone),
        attempt_deadline_seconds=deadline,
        retry=retry,
        time_limit_seconds=time_limit,
        body=dict(body) if body is not None else None,
        handler=handler,
        overlap=OverlapPolicy(overlap),
        starting_deadline_seconds=starting_deadline,
        target=target,
        access=access,
        paused=paused is True,
        pause_recorded="paused" in item,
        catchup=catchup,
        run_key=run_key,
        pause_after_failures=pause_after_failures,
    )


def _catchup(raw: Any, prefix: str, errors: ConfigProblems) -> Catchup | None:
    """`catchup: {windowSeconds: N, runs: latest | all}`; the timing rules bound the window
    by the audit's schedule and the ledger's retention
    (policy/scheduler_guardrails/rules/timing/catchup.py)."""
    if not isinstance(raw, Mapping):
        errors.append(f"{errors.key(prefix)}: expected an object such as {{windowSeconds: 7200, runs: all}}")
        return None
    before = len(errors)
    unknown_keys(raw, prefix, CATCHUP_KEYS, errors, what="catchup key")
    if "windowSeconds" not in raw:
        errors.append(
            f"{errors.key(f'{prefix}.windowSeconds')}: missing: how far back missed runs are delivered"
        )
        window = None
    else:
        window = _number(raw["windowSeconds"], f"{prefix}.windowSeconds", errors)
        if window is not None and window <= 0:
            errors.append(
                f"{errors.key(f'{prefix}.windowSeconds')}: expected a positive number of seconds, "
                f"got {raw['windowSeconds']!r}"
            )
    runs = raw.get("runs", DEFAULT_CATCHUP_RUNS.value)
    if runs not in tuple(CatchupRuns):
        errors.append(f"{errors.key(f'{prefix}.runs')}: {runs!r} is not one of {', '.join(CatchupRuns)}")
    if len(errors) > before or window is None:
        return None
    return Catchup(window_seconds=window, runs=CatchupRuns(runs))


def _time_limit(item: Mapping[str, Any], prefix: str, errors: ConfigProblems) -> float | None:
    """A job's own time limit (timeLimitSeconds); the timing rules bound it by the function's."""
    if "timeLimitSeconds" not in item:
        return None
    return _number(item["timeLimitSeconds"], f"{prefix}.timeLimitSeconds", errors)


def _starting_deadline(item: Mapping[str, Any], prefix: str, errors: ConfigProblems) -> float | None:
    """startingDeadlineSeconds: a number; the timing rules judge it against the retries."""
    if "startingDeadlineSeconds" not in item:
        return None
    return _number(item["startingDeadlineSeconds"], f"{prefix}.startingDeadlineSeconds", errors)


def _pause_after_failures(
    item: Mapping[str, Any], prefix: str, name: Any, errors: ConfigProblems
) -> int | None:
    """pauseAfterFailures: a whole number of failed runs, at least one."""
    if "pauseAfterFailures" not in item:
        return None
    value = item["pauseAfterFailures"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        errors.append(
            f"{errors.key(f'{prefix}.pauseAfterFailures')}: job {name!r}: expected a whole number of "
            f"failed runs, at least 1, got {value!r}"
        )
        return None
    return value


def _retry(raw: Any, prefix: str, errors: ConfigProblems) -> RetryConfig | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{errors.key(prefix)}: expected an object, got {raw!r}")
        return None
    before = len(errors)
    unknown_keys(raw, prefix, tuple(RETRY_KEYS), errors, what="retry key")
    fields: dict[str, float] = {}
    for key, field in RETRY_KEYS.items():
        if key in raw:
            number = _number(raw[key], f"{prefix}.{key}", errors, integer=field in _INTEGER_RETRY_FIELDS)
            if number is not None:
                fields[field] = number
    if len(errors) > before:
        return None
    return RetryConfig(
        retry_count=int(fields.get("retry_count", DEFAULT_RETRY.retry_count)),
        max_retry_duration_seconds=fields.get(
            "max_retry_duration_seconds", DEFAULT_RETRY.max_retry_duration_seconds
        ),
        min_backoff_seconds=fields.get("min_backoff_seconds", DEFAULT_RETRY.min_backoff_seconds),
        max_backoff_seconds=fields.get("max_backoff_seconds", DEFAULT_RETRY.max_backoff_seconds),
        max_doublings=int(fields.get("max_doublings", DEFAULT_RETRY.max_doublings)),
    )


def _known_time_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        # Without a tz database on this machine we cannot judge; Cloud Scheduler will.
        return not available_timezones()
    return True
