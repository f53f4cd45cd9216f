"""The function's configuration, read once from the environment at start-up.

A bad value must stop the instance from starting with a message that names the variable,
rather than surface later as a run that was executed twice or never.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# The environment variables the function reads: its whole contract with whatever deploys it.
# The stack writes them (infra/plan/), the policy pack reads them back and the docs list them,
# all from these names.
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
DATABASE_ENV = "FIRESTORE_DATABASE"
RUNS_COLLECTION_ENV = "RUNS_COLLECTION"
LEASE_SECONDS_ENV = "LEASE_SECONDS"
TIME_LIMIT_ENV = "JOB_TIME_LIMIT_SECONDS"
JOB_TIME_LIMITS_ENV = "JOB_TIME_LIMITS"
RETENTION_SECONDS_ENV = "RETENTION_SECONDS"
JOB_HANDLER_ENV = "JOB_HANDLER"
JOB_HANDLERS_ENV = "JOB_HANDLERS"
JOB_OVERLAP_ENV = "JOB_OVERLAP"
JOB_STARTING_DEADLINES_ENV = "JOB_STARTING_DEADLINES"
# Set by Cloud Run itself, never by the stack.
SERVICE_ENV = "K_SERVICE"

DEFAULT_JOB_HANDLER = "jobs.demo:run_demo_job"
DEFAULT_DATABASE = "(default)"
# Default collections of the run records and of the workflows' idempotency tokens. The stack's
# settings, the policy pack, the bench and the tests take them from here.
DEFAULT_RUNS_COLLECTION = "scheduler_runs"
DEFAULT_IDEMPOTENCY_COLLECTION = "idempotency_tokens"
# A run's lease. Short, because a crashed instance's run waits this long for a retry to take
# it over; a job that runs longer keeps it by renewing it (delivery/heartbeat.py).
DEFAULT_LEASE_SECONDS = 30.0
# A running job's lease is renewed this many times per lease, so it survives two renewals
# lost in a row. Here, not in delivery/heartbeat.py, so the stack's timing rules read it too.
RENEWALS_PER_LEASE = 3
# An attempt is ended this long before the function's timeout, while its request still has
# CPU: Cloud Run answers a timed-out request but does not stop the code handling it.
TIME_LIMIT_MARGIN_SECONDS = 5.0
# Cloud Run functions' default timeout, and an attempt's time limit within it.
DEFAULT_FUNCTION_TIMEOUT_SECONDS = 60.0
DEFAULT_TIME_LIMIT_SECONDS = DEFAULT_FUNCTION_TIMEOUT_SECONDS - TIME_LIMIT_MARGIN_SECONDS
# A run record outlives its job's whole retry window by default (the TTL deletes it after).
DEFAULT_RETENTION_SECONDS = 86_400.0
# `module:callable`, the module a dotted path of identifiers (`jobs.my_job:run`): what the
# router imports, and what the stack's config checks accept before deploy.
HANDLER_PATTERN = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$", re.ASCII)
_COLLECTION_ID = re.compile(r"^[^/]{1,1500}$")


def time_limit_for_timeout(function_timeout_seconds: float) -> float:
    """The time limit of an attempt in a function with this timeout."""
    return function_timeout_seconds - TIME_LIMIT_MARGIN_SECONDS


class OverlapPolicy(StrEnum):
    """What a run does when another run of the same job still holds its lease."""

    ALLOW = "allow"  # run anyway (the default: runs of one job are independent)
    SKIP = "skip"  # record the run as skipped, never run it
    WAIT = "wait"  # answer 409 until the other run has finished, then run


class ConfigError(ValueError):
    """An environment variable holds a value the function cannot work with."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"environment variable {variable}: {problem}")
        self.variable = variable


@dataclass(frozen=True)
class FunctionConfig:
    """Defaults suit a lone deployment; the stack sets every value explicitly."""

    project: str | None = None
    database: str = DEFAULT_DATABASE
    runs_collection: str = DEFAULT_RUNS_COLLECTION
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    # How long one attempt's job may run before its instance is ended (the stack sets the
    # function timeout less TIME_LIMIT_MARGIN_SECONDS): every job's limit, and the ceiling of
    # the per-job limits below.
    time_limit_seconds: float = DEFAULT_TIME_LIMIT_SECONDS
    # Shorter limits of single jobs, keyed by X-CloudScheduler-JobName (jobs[].timeLimitSeconds).
    job_time_limits: Mapping[str, float] = field(default_factory=dict)
    # Past the job's whole retry window; the TTL policy deletes records after it.
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    job_handler: str = DEFAULT_JOB_HANDLER
    # Per-job overrides of job_handler, keyed by X-CloudScheduler-JobName.
    job_handlers: Mapping[str, str] = field(default_factory=dict)
    # Per-job overlap policy, keyed by X-CloudScheduler-JobName; absent jobs allow overlap.
    overlap: Mapping[str, OverlapPolicy] = field(default_factory=dict)
    # Per-job starting deadlines in seconds, keyed by X-CloudScheduler-JobName
    # (jobs[].startingDeadlineSeconds): a run delivered later than that after its ScheduleTime
    # is recorded skipped_late and not run. Absent jobs have none.
    starting_deadlines: Mapping[str, float] = field(default_factory=dict)
    # The Cloud Run service (K_SERVICE, set by Cloud Run): the target recorded with each run
    # unless @exactly_once(target=...) names one, so two functions that share a runs
    # collection and a job name cannot decide each other's runs.
    service: str = ""

    def overlap_for(self, job_name: str) -> OverlapPolicy:
        return self.overlap.get(job_name, OverlapPolicy.ALLOW)

    def time_limit_for(self, job_name: str) -> float:
        return self.job_time_limits.get(job_name, self.time_limit_seconds)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FunctionConfig:
        defaults = cls()
        lease = positive_seconds(env, LEASE_SECONDS_ENV, defaults.lease_seconds)
        retention = positive_seconds(env, RETENTION_SECONDS_ENV, defaults.retention_seconds)
        if retention < lease:
            raise ConfigError(
                RETENTION_SECONDS_ENV,
                f"{retention:g} is shorter than {LEASE_SECONDS_ENV}={lease:g}: records would expire "
                "while leased",
            )
        time_limit = positive_seconds(env, TIME_LIMIT_ENV, defaults.time_limit_seconds)
        runs_collection = _non_empty(env, RUNS_COLLECTION_ENV, defaults.runs_collection)
        return cls(
            project=env.get(PROJECT_ENV) or None,
            database=_non_empty(env, DATABASE_ENV, defaults.database),
            runs_collection=collection_id(RUNS_COLLECTION_ENV, runs_collection),
            lease_seconds=lease,
            time_limit_seconds=time_limit,
            job_time_limits=_time_limit_map(env, time_limit),
            retention_seconds=retention,
            job_handler=_handler_spec(JOB_HANDLER_ENV, env.get(JOB_HANDLER_ENV) or defaults.job_handler),
            job_handlers=_handler_map(env),
            overlap=_overlap_map(env),
            starting_deadlines=_starting_deadline_map(env),
            service=env.get(SERVICE_ENV, "").strip(),
        )


def _non_empty(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, default).strip()
    if not value:
        raise ConfigError(name, "must not be empty")
    return value


def is_collection_id(value: str) -> bool:
    """Whether Firestore takes `value` as a top-level collection id: the one judgement of the
    run ledger's collection and the token check's, here and in the stack's config checks."""
    return bool(_COLLECTION_ID.match(value)) and not value.startswith("__")


def collection_id(variable: str, value: str) -> str:
    """`value`, or a ConfigError naming `variable` when it is not a collection id."""
    if not is_collection_id(value):
        raise ConfigError(variable, f"{value!r} is not a Firestore collection id (no '/', no leading '__')")
    return value


def positive_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A duration from the environment: unset or blank is `default`; anything but a finite
    positive number is a ConfigError naming the variable."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, f"{raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(name, f"{raw!r} must be a positive number of seconds")
    return value


def _handler_spec(name: str, value: str) -> str:
    if not HANDLER_PATTERN.match(value):
        raise ConfigError(name, f"{value!r} is not of the form module:callable (e.g. {DEFAULT_JOB_HANDLER})")
    return value


def _json_object(env: Mapping[str, str], name: str, expected: str) -> dict[str, Any]:
    """The per-job maps (JOB_HANDLERS, JOB_OVERLAP, JOB_TIME_LIMITS): unset or blank is {}."""
    raw = env.get(name, "").strip()
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ConfigError(name, f"not JSON ({error.msg}); expected {expected}") from None
    if not isinstance(parsed, dict):
        raise ConfigError(name, f"must be {expected}")
    return parsed


def _handler_map(env: Mapping[str, str]) -> dict[str, str]:
    expected = 'a JSON object {"job name": "module:callable"}'
    parsed = _json_object(env, JOB_HANDLERS_ENV, expected)
    if not all(isinstance(spec, str) for spec in parsed.values()):
        raise ConfigError(JOB_HANDLERS_ENV, f"must be {expected}")
    return {job: _handler_spec(f"{JOB_HANDLERS_ENV}[{job!r}]", spec) for job, spec in parsed.items()}


def _overlap_map(env: Mapping[str, str]) -> dict[str, OverlapPolicy]:
    parsed = _json_object(env, JOB_OVERLAP_ENV, 'a JSON object {"job name": "skip" | "wait"}')
    policies = {policy.value for policy in OverlapPolicy}
    for job, policy in parsed.items():
        if not job or policy not in policies:
            raise ConfigError(JOB_OVERLAP_ENV, f"{job!r}: {policy!r} is not one of {sorted(policies)}")
    return {job: OverlapPolicy(policy) for job, policy in parsed.items()}


def _time_limit_map(env: Mapping[str, str], ceiling: float) -> dict[str, float]:
    """JOB_TIME_LIMITS: per-job limits, each positive and at most JOB_TIME_LIMIT_SECONDS (the
    function timeout bounds every job: one instance serves them all)."""
    parsed = _json_object(env, JOB_TIME_LIMITS_ENV, 'a JSON object {"job name": <seconds>}')
    for job, seconds in parsed.items():
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not job or not number or not 0 < seconds <= ceiling:
            raise ConfigError(
                JOB_TIME_LIMITS_ENV,
                f"{job!r}: {seconds!r} must be a number of seconds above 0 and at most "
                f"{TIME_LIMIT_ENV}={ceiling:g}",
            )
    return {job: float(seconds) for job, seconds in parsed.items()}


def _starting_deadline_map(env: Mapping[str, str]) -> dict[str, float]:
    """JOB_STARTING_DEADLINES: per-job starting deadlines, each a positive number of seconds."""
    parsed = _json_object(env, JOB_STARTING_DEADLINES_ENV, 'a JSON object {"job name": <seconds>}')
    for job, seconds in parsed.items():
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not job or not number or not 0 < seconds < math.inf:
            raise ConfigError(
                JOB_STARTING_DEADLINES_ENV, f"{job!r}: {seconds!r} must be a number of seconds above 0"
            )
    return {job: float(seconds) for job, seconds in parsed.items()}
