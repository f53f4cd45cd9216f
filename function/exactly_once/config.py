"""The function's configuration, read once at start-up: the deployment's values from the
environment, each job's policy from the job table (a JSON file named by JOB_TABLE).

The per-job facts live in a file, not in the environment, because Cloud Run limits a function's
whole environment to 32 KiB: a table of a thousand jobs (handler, limits, overlap, the audit's
list) is several times that. The stack writes the file into the function's source archive, so
a change to it is a change of the source, deployed as one.

A bad value must stop the instance from starting with a message that names the variable or the
table's key, rather than surface later as a run that was executed twice or never.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from exactly_once.run_key import JOB_ID_PATTERN, zone_of

# The environment variables the function reads: its whole contract with whatever deploys it.
# The stack writes them (infra/plan/), the policy pack reads them back and the docs list them,
# all from these names.
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
DATABASE_ENV = "FIRESTORE_DATABASE"
RUNS_COLLECTION_ENV = "RUNS_COLLECTION"
LEASE_SECONDS_ENV = "LEASE_SECONDS"
TIME_LIMIT_ENV = "JOB_TIME_LIMIT_SECONDS"
RETENTION_SECONDS_ENV = "RETENTION_SECONDS"
# The handler of every job the table does not name (a lone deployment's one job); unset, such
# a job is refused, naming it.
JOB_HANDLER_ENV = "JOB_HANDLER"
# The path of the job table (JobTable). The stack ships the file as JOB_TABLE_FILE at the root of
# the function's source, beside main.py, and names it relative to there: a relative path is
# resolved against SOURCE_ROOT, never the working directory, which is the platform's to choose.
JOB_TABLE_ENV = "JOB_TABLE"
JOB_TABLE_FILE = "job_table.json"
# The deployed source's root, where main.py is: this package ships inside it (function/).
SOURCE_ROOT = Path(__file__).resolve().parent.parent
# Set by Cloud Run itself, never by the stack.
SERVICE_ENV = "K_SERVICE"

# The example a malformed handler's message shows.
HANDLER_EXAMPLE = "reports.nightly:run"
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


class JobTableError(ConfigError):
    """The job table holds a value the function cannot work with: named by its key."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        ValueError.__init__(self, f"job table {source} ({JOB_TABLE_ENV}): {key}: {problem}")
        self.variable = JOB_TABLE_ENV
        self.key = key


@dataclass(frozen=True)
class JobPolicy:
    """Everything the function decides for one job, from its entry in the job table."""

    # `module:callable`; None: the deployment's JOB_HANDLER.
    handler: str | None = None
    # A limit shorter than the function's (jobs[].timeLimitSeconds); None: the function's.
    time_limit_seconds: float | None = None
    # A run delivered later than this after its ScheduleTime is recorded skipped_late, not
    # run (jobs[].startingDeadlineSeconds); None: never late.
    starting_deadline_seconds: float | None = None
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    # What the job's runs and status are keyed by, when not its job id (jobs[].runKey, as the
    # id a Scheduler job of that name would have): a job renamed with it kept keeps its runs.
    run_key: str | None = None
    # After this many runs in a row failed, the job's next runs are recorded skipped (paused)
    # until a success or `ops resume` (jobs[].pauseAfterFailures, delivery/failure_pause.py);
    # None: never paused.
    pause_after_failures: int | None = None
    # The IANA zone the job's schedule is read in (jobs[].timeZone); None: UTC. A wall time its
    # zone repeats (the hour clocks go back) is one run: a delivery of its second instant is
    # the run of its first (run_key.first_occurrence).
    time_zone: str | None = None

    def to_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if self.handler is not None:
            fields["handler"] = self.handler
        if self.time_limit_seconds is not None:
            fields["time_limit_seconds"] = self.time_limit_seconds
        if self.starting_deadline_seconds is not None:
            fields["starting_deadline_seconds"] = self.starting_deadline_seconds
        if self.overlap is not OverlapPolicy.ALLOW:
            fields["overlap"] = self.overlap.value
        if self.run_key is not None:
            fields["run_key"] = self.run_key
        if self.pause_after_failures is not None:
            fields["pause_after_failures"] = self.pause_after_failures
        if self.time_zone is not None:
            fields["time_zone"] = self.time_zone
        return fields


# A job the table does not name: the function's limit, no starting deadline, overlap allowed,
# its runs keyed by its job id, never paused.
DEFAULT_POLICY = JobPolicy()
_POLICY_KEYS = frozenset(
    {
        "handler",
        "time_limit_seconds",
        "starting_deadline_seconds",
        "overlap",
        "run_key",
        "pause_after_failures",
        "time_zone",
    }
)
# Read once: a thousand jobs' table checks each entry's overlap against them.
_OVERLAP_VALUES = tuple(policy.value for policy in OverlapPolicy)


@dataclass(frozen=True)
class JobTable:
    """The job table: each job's policy by X-CloudScheduler-JobName, and the missed-run audit's
    configuration (its raw JSON object, which exactly_once.audit reads) when the stack has one.

    File: {"jobs": {"<job name>": {"handler"?, "time_limit_seconds"?,
    "starting_deadline_seconds"?, "overlap"?, "run_key"?, "pause_after_failures"?,
    "time_zone"?}}, "names_every_job"?: true, "audit"?: {...}}.

    `names_every_job`: the table names every job its function serves (a stack's does), so a
    delivery of any other is refused unclaimed; without it, a job it does not name has the
    defaults and runs JOB_HANDLER."""

    jobs: Mapping[str, JobPolicy] = field(default_factory=dict)
    audit: Mapping[str, Any] | None = None
    names_every_job: bool = False

    def to_json(self) -> str:
        fields: dict[str, Any] = {
            "jobs": {name: policy.to_json() for name, policy in sorted(self.jobs.items())}
        }
        if self.names_every_job:
            fields["names_every_job"] = True
        if self.audit is not None:
            fields["audit"] = self.audit
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, source: str, ceiling: float) -> JobTable:
        """Each job's policy, checked: a time limit above `ceiling` (the function's) is refused."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise JobTableError(source, "(file)", f"not JSON ({error.msg} at line {error.lineno})") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("jobs", {}), dict):
            raise JobTableError(source, "(file)", 'expected {"jobs": {"<job name>": {...}}, "audit"?: {...}}')
        unknown = sorted(set(raw) - {"jobs", "audit", "names_every_job"})
        if unknown:
            raise JobTableError(source, unknown[0], "unknown key (expected jobs, names_every_job, audit)")
        names_every_job = raw.get("names_every_job", False)
        if not isinstance(names_every_job, bool):
            raise JobTableError(source, "names_every_job", f"{names_every_job!r} is not true or false")
        audit = raw.get("audit")
        if audit is not None and not isinstance(audit, dict):
            raise JobTableError(source, "audit", "expected an object")
        jobs = {job: _job_policy(source, job, entry, ceiling) for job, entry in raw.get("jobs", {}).items()}
        _check_run_keys(source, jobs)
        return cls(jobs=jobs, audit=audit, names_every_job=names_every_job)


def _job_policy(source: str, job: str, entry: Any, ceiling: float) -> JobPolicy:
    where = f"jobs[{job!r}]"
    if not job:
        raise JobTableError(source, where, "a job name must not be empty")
    if not isinstance(entry, dict):
        raise JobTableError(source, where, "expected an object")
    unknown = sorted(set(entry) - _POLICY_KEYS)
    if unknown:
        raise JobTableError(
            source, f"{where}.{unknown[0]}", f"unknown key (expected {', '.join(sorted(_POLICY_KEYS))})"
        )
    handler = entry.get("handler")
    if handler is not None and (not isinstance(handler, str) or not HANDLER_PATTERN.match(handler)):
        raise JobTableError(
            source,
            f"{where}.handler",
            f"{handler!r} is not of the form module:callable (e.g. {HANDLER_EXAMPLE})",
        )
    limit = _table_seconds(source, f"{where}.time_limit_seconds", entry.get("time_limit_seconds"))
    if limit is not None and limit > ceiling:
        raise JobTableError(
            source, f"{where}.time_limit_seconds", f"{limit:g} is above {TIME_LIMIT_ENV}={ceiling:g}"
        )
    overlap = entry.get("overlap", OverlapPolicy.ALLOW.value)
    if overlap not in _OVERLAP_VALUES:
        raise JobTableError(source, f"{where}.overlap", f"{overlap!r} is not one of {list(_OVERLAP_VALUES)}")
    return JobPolicy(
        handler=handler,
        time_limit_seconds=limit,
        starting_deadline_seconds=_table_seconds(
            source, f"{where}.starting_deadline_seconds", entry.get("starting_deadline_seconds")
        ),
        overlap=OverlapPolicy(overlap),
        run_key=_run_key(source, f"{where}.run_key", entry.get("run_key")),
        pause_after_failures=_table_count(
            source, f"{where}.pause_after_failures", entry.get("pause_after_failures")
        ),
        time_zone=_time_zone(source, f"{where}.time_zone", entry.get("time_zone")),
    )


def _time_zone(source: str, key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or zone_of(value) is None):
        raise JobTableError(source, key, f"{value!r} is not an IANA time zone (e.g. Europe/Berlin)")
    return value


def _table_count(source: str, key: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise JobTableError(source, key, f"{value!r} must be a whole number of runs, at least 1")
    return value


def _run_key(source: str, key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or not JOB_ID_PATTERN.match(value):
        raise JobTableError(
            source, key, f"{value!r} is not a Cloud Scheduler job id (A-Z, a-z, 0-9, '-', '_')"
        )
    return value


def zones_of(jobs: Mapping[str, JobPolicy]) -> dict[str, ZoneInfo]:
    """The zones of the jobs whose schedules are read in one (the others' are UTC)."""
    return {job: zone for job, policy in jobs.items() if (zone := zone_of(policy.time_zone)) is not None}


def run_keys_of(jobs: Mapping[str, JobPolicy]) -> dict[str, str]:
    """The job ids whose runs are keyed by a run key of their own, to that key: every other
    job's runs are keyed by its job id."""
    return {job: policy.run_key for job, policy in jobs.items() if policy.run_key is not None}


def _check_run_keys(source: str, jobs: Mapping[str, JobPolicy]) -> None:
    """Two jobs keyed alike would run one run id between them, each run of one suppressing the
    other's: refused, naming both. A job without a run key is keyed by its own name. (Only
    the jobs the table names can be compared here; the stack's config checks every job.)"""
    owners: dict[str, str] = {}
    for job, policy in sorted(jobs.items()):
        key = job if policy.run_key is None else policy.run_key
        if key in owners:
            raise JobTableError(
                source, f"jobs[{job!r}].run_key", f"{key!r} is also the run key of job {owners[key]!r}"
            )
        owners[key] = job


def _table_seconds(source: str, key: str, value: Any) -> float | None:
    if value is None:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 < value < math.inf:
        raise JobTableError(source, key, f"{value!r} must be a number of seconds above 0")
    return float(value)


def read_job_table(env: Mapping[str, str], ceiling: float) -> JobTable:
    """The table JOB_TABLE names (relative: to SOURCE_ROOT), read once at start-up; none
    (unset) is an empty table."""
    named = env.get(JOB_TABLE_ENV, "").strip()
    if not named:
        return JobTable()
    path = SOURCE_ROOT / named  # an absolute path stays as it is
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(JOB_TABLE_ENV, f"cannot read {str(path)!r}: {error.strerror or error}") from None
    return JobTable.from_json(text, named, ceiling)


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
    # Past the job's whole retry window; the TTL policy deletes records after it.
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    # The handler of a job the table names none for; None: such a job is refused.
    job_handler: str | None = None
    # Each job's policy, keyed by X-CloudScheduler-JobName (the job table); absent jobs run
    # job_handler with the function's limit, no starting deadline, overlap allowed.
    jobs: Mapping[str, JobPolicy] = field(default_factory=dict)
    # The missed-run audit's configuration from the job table (read by exactly_once.audit).
    audit: Mapping[str, Any] | None = None
    # Every job the table names when it names every job its function serves (a stack's does),
    # so that a delivery of any other is refused unclaimed; None: every job is served.
    known_jobs: frozenset[str] | None = None
    # The Cloud Run service (K_SERVICE, set by Cloud Run): the target recorded with each run
    # unless @exactly_once(target=...) names one, so two functions that share a runs
    # collection and a job name cannot decide each other's runs.
    service: str = ""

    def policy_for(self, job_name: str) -> JobPolicy:
        return self.jobs.get(job_name, DEFAULT_POLICY)

    def overlap_for(self, job_name: str) -> OverlapPolicy:
        return self.policy_for(job_name).overlap

    def time_limit_for(self, job_name: str) -> float:
        return self.policy_for(job_name).time_limit_seconds or self.time_limit_seconds

    # The handlers the router resolves at start-up (main.py): only the jobs that name one.
    @property
    def job_handlers(self) -> dict[str, str]:
        return {job: policy.handler for job, policy in self.jobs.items() if policy.handler is not None}

    @property
    def pause_after_failures(self) -> dict[str, int]:
        return {
            job: policy.pause_after_failures
            for job, policy in self.jobs.items()
            if policy.pause_after_failures is not None
        }

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
        table = read_job_table(env, time_limit)
        default_handler = env.get(JOB_HANDLER_ENV, "").strip()
        return cls(
            project=env.get(PROJECT_ENV) or None,
            database=_non_empty(env, DATABASE_ENV, defaults.database),
            runs_collection=collection_id(RUNS_COLLECTION_ENV, runs_collection),
            lease_seconds=lease,
            time_limit_seconds=time_limit,
            retention_seconds=retention,
            job_handler=_handler_spec(JOB_HANDLER_ENV, default_handler) if default_handler else None,
            jobs=table.jobs,
            audit=table.audit,
            known_jobs=frozenset(table.jobs) if table.names_every_job else None,
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
        raise ConfigError(name, f"{value!r} is not of the form module:callable (e.g. {HANDLER_EXAMPLE})")
    return value
