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

DEFAULT_JOB_HANDLER = "jobs.demo:run_demo_job"
# Default collections of the run records and of the workflows' idempotency tokens. The stack's
# settings, the policy pack, the bench and the tests take them from here.
DEFAULT_RUNS_COLLECTION = "scheduler_runs"
DEFAULT_IDEMPOTENCY_COLLECTION = "idempotency_tokens"
_HANDLER_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_COLLECTION_ID = re.compile(r"^[^/]{1,1500}$")


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
    database: str = "(default)"
    runs_collection: str = DEFAULT_RUNS_COLLECTION
    # At least the function timeout; the stack derives it as timeout + grace.
    lease_seconds: float = 300.0
    # Past the job's whole retry window; the TTL policy deletes records after it.
    retention_seconds: float = 86_400.0
    job_handler: str = DEFAULT_JOB_HANDLER
    # Per-job overrides of job_handler, keyed by X-CloudScheduler-JobName.
    job_handlers: Mapping[str, str] = field(default_factory=dict)
    # Per-job overlap policy, keyed by X-CloudScheduler-JobName; absent jobs allow overlap.
    overlap: Mapping[str, OverlapPolicy] = field(default_factory=dict)

    def overlap_for(self, job_name: str) -> OverlapPolicy:
        return self.overlap.get(job_name, OverlapPolicy.ALLOW)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FunctionConfig:
        defaults = cls()
        lease = _positive_seconds(env, "LEASE_SECONDS", defaults.lease_seconds)
        retention = _positive_seconds(env, "RETENTION_SECONDS", defaults.retention_seconds)
        if retention < lease:
            raise ConfigError(
                "RETENTION_SECONDS",
                f"{retention:g} is shorter than LEASE_SECONDS={lease:g}: records would expire while leased",
            )
        return cls(
            project=env.get("GOOGLE_CLOUD_PROJECT") or None,
            database=_non_empty(env, "FIRESTORE_DATABASE", defaults.database),
            runs_collection=_collection_id(env, "RUNS_COLLECTION", defaults.runs_collection),
            lease_seconds=lease,
            retention_seconds=retention,
            job_handler=_handler_spec("JOB_HANDLER", env.get("JOB_HANDLER") or defaults.job_handler),
            job_handlers=_handler_map(env),
            overlap=_overlap_map(env),
        )


def _non_empty(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, default).strip()
    if not value:
        raise ConfigError(name, "must not be empty")
    return value


def _collection_id(env: Mapping[str, str], name: str, default: str) -> str:
    value = _non_empty(env, name, default)
    if not _COLLECTION_ID.match(value) or value.startswith("__"):
        raise ConfigError(name, f"{value!r} is not a Firestore collection id (no '/', no leading '__')")
    return value


def _positive_seconds(env: Mapping[str, str], name: str, default: float) -> float:
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
    if not _HANDLER_SPEC.match(value):
        raise ConfigError(name, f"{value!r} is not of the form module:callable (e.g. {DEFAULT_JOB_HANDLER})")
    return value


def _handler_map(env: Mapping[str, str]) -> dict[str, str]:
    raw = env.get("JOB_HANDLERS", "").strip()
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ConfigError("JOB_HANDLERS", f"not JSON ({error.msg})") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise ConfigError("JOB_HANDLERS", 'must be a JSON object {"job name": "module:callable"}')
    return {job: _handler_spec(f"JOB_HANDLERS[{job!r}]", spec) for job, spec in parsed.items()}


def _overlap_map(env: Mapping[str, str]) -> dict[str, OverlapPolicy]:
    raw = env.get("JOB_OVERLAP", "").strip()
    if not raw:
        return {}
    expected = 'a JSON object {"job name": "skip" | "wait"}'
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ConfigError("JOB_OVERLAP", f"not JSON ({error.msg}); expected {expected}") from None
    if not isinstance(parsed, dict):
        raise ConfigError("JOB_OVERLAP", f"must be {expected}")
    policies = {policy.value for policy in OverlapPolicy}
    for job, policy in parsed.items():
        if not job or policy not in policies:
            raise ConfigError("JOB_OVERLAP", f"{job!r}: {policy!r} is not one of {sorted(policies)}")
    return {job: OverlapPolicy(policy) for job, policy in parsed.items()}
