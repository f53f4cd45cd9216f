"""Typed, validated stack settings: the one reading of `Pulumi.yaml` + `Pulumi.<stack>.yaml`.

The Pulumi program, the local Cloud Scheduler and the policy pack all read the stack's jobs
through this module, so what `make demo` fires is what `pulumi up` would deploy. It must not
import pulumi: the local scheduler and the policy pack run without the Pulumi engine.

Validation happens here, before any resource is declared, and every error names the Pulumi
config key a user has to edit (`exactly-once-scheduler:jobs[0].attemptDeadlineSeconds`),
not the Python attribute it ended up in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import yaml

from infra import timing
from infra.timing import JobTiming, RetryConfig, Violation

PROJECT_NAME = "exactly-once-scheduler"
CONFIG_NAMESPACE = PROJECT_NAME
REPO_ROOT = Path(__file__).resolve().parent.parent

INGRESS_SETTINGS = ("ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_ALL")
ConfigType = Literal["string", "integer", "boolean"]


@dataclass(frozen=True)
class ConfigKey:
    """One scalar stack config key. Pulumi.yaml declares the same schema; a test keeps them equal."""

    name: str
    type: ConfigType
    default: str | int | bool
    description: str


# Scalar keys. `jobs` is a list of objects, which Pulumi's project config schema cannot type,
# so it is validated below instead and documented in the README.
CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "functionTimeoutSeconds",
        "integer",
        60,
        "Cloud Run function request timeout in seconds (1..3600). The run lease is derived from it.",
    ),
    ConfigKey(
        "leaseGraceSeconds",
        "integer",
        10,
        "Seconds added to the function timeout to form the run lease (LEASE_SECONDS), for clock skew.",
    ),
    ConfigKey(
        "retentionSeconds",
        "integer",
        86400,
        "How long a run record is kept (TTL on expire_at); must outlive the latest possible retry.",
    ),
    ConfigKey("maxInstances", "integer", 10, "Maximum number of function instances."),
    ConfigKey(
        "ingress",
        "string",
        "ALLOW_INTERNAL_ONLY",
        "Function ingress: ALLOW_INTERNAL_ONLY (Cloud Scheduler in the same project is internal), "
        "ALLOW_INTERNAL_AND_GCLB or ALLOW_ALL.",
    ),
    ConfigKey("databaseName", "string", "scheduler-dedup", "Firestore database holding the run records."),
    ConfigKey("runsCollection", "string", "scheduler_runs", "Firestore collection of run records."),
    ConfigKey(
        "deletionProtection",
        "boolean",
        True,
        "Protect the Firestore database from deletion (and keep it on `pulumi destroy`).",
    ),
    ConfigKey(
        "jobHandler",
        "string",
        "jobs.demo:run_demo_job",
        "Default job logic as module:callable inside function/, for jobs that set no handler.",
    ),
    ConfigKey(
        "idempotencyCollection",
        "string",
        "idempotency_tokens",
        "Firestore collection of the token check's records (deployed with a sample workflow).",
    ),
    ConfigKey(
        "idempotencyRetentionSeconds",
        "integer",
        604800,
        "How long a token record is kept (TTL on expire_at); at least retentionSeconds.",
    ),
)
_KEYS_BY_NAME = {key.name: key for key in CONFIG_KEYS}
JOBS_KEY = "jobs"

# A retry policy that survives a crashed attempt with the default 70 s lease:
# instant failures retry at 10, 30, 70, 150, 310 s.
DEFAULT_RETRY = RetryConfig(
    retry_count=5,
    max_retry_duration_seconds=0.0,
    min_backoff_seconds=10.0,
    max_backoff_seconds=300.0,
    max_doublings=3,
)
DEFAULT_TIME_ZONE = "Etc/UTC"

_JOB_KEYS = ("name", "schedule", "timeZone", "attemptDeadlineSeconds", "retry", "body", "handler", "workflow")
_WORKFLOW_KEYS = ("sample", "name", "argument")

# The Workflows proxy job (function/jobs/workflows.py) and its client-side call timeout
# (CALL_TIMEOUT_SECONDS there; a test keeps the two equal). A function timeout shorter than
# the call plus some margin lets Cloud Run cut a slow call off, leaving the run to a retry.
WORKFLOWS_HANDLER = "jobs.workflows:start_workflow_execution"
WORKFLOWS_HANDLER_MODULE = WORKFLOWS_HANDLER.split(":")[0]
WORKFLOWS_CALL_TIMEOUT_SECONDS = 30.0
WORKFLOWS_TIMEOUT_MARGIN_SECONDS = 5.0
_RETRY_KEYS = {
    "retryCount": "retry_count",
    "maxRetryDurationSeconds": "max_retry_duration_seconds",
    "minBackoffSeconds": "min_backoff_seconds",
    "maxBackoffSeconds": "max_backoff_seconds",
    "maxDoublings": "max_doublings",
}
_INTEGER_RETRY_FIELDS = {"retry_count", "max_doublings"}

_JOB_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_HANDLER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_DATABASE_ID = re.compile(r"^[a-z][a-z0-9-]{2,61}[a-z0-9]$")
# What function/jobs/workflows.py accepts as body.workflow.
WORKFLOW_RESOURCE_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/workflows/[^/]+$")


class SettingsError(ValueError):
    """A stack config that must not be deployed; the message names the config keys to fix."""


def config_key(key: str) -> str:
    """The fully qualified key, as `pulumi config set` and `Pulumi.<stack>.yaml` spell it."""
    return f"{CONFIG_NAMESPACE}:{key}"


@dataclass(frozen=True)
class WorkflowSettings:
    """A job's `workflow` setting: the job starts one Workflows execution per scheduled run.

    Either `sample` (the stack deploys infra/sample_workflow.yaml for this job, so its resource
    name is only known to the Pulumi program) or `name` (an existing workflow). `argument`
    becomes the body's `argument`, which the workflow receives as `args.payload`.
    """

    sample: bool
    name: str | None = None
    argument: Mapping[str, Any] | None = None

    def body(self, workflow: str) -> dict[str, Any]:
        """The job body jobs.workflows:start_workflow_execution reads, for `workflow`."""
        body: dict[str, Any] = {"workflow": workflow}
        if self.argument is not None:
            body["argument"] = dict(self.argument)
        return body


@dataclass(frozen=True)
class JobSettings:
    """One Cloud Scheduler job of the stack."""

    name: str
    schedule: str
    time_zone: str
    attempt_deadline_seconds: float
    retry: RetryConfig
    body: Mapping[str, Any] | None = None
    handler: str | None = None
    workflow: WorkflowSettings | None = None

    @property
    def sample_workflow(self) -> bool:
        """True when the stack deploys a sample workflow for this job."""
        return self.workflow is not None and self.workflow.sample

    def body_bytes(self, sample_workflow: str | None = None) -> bytes | None:
        """The exact request body Cloud Scheduler sends (and the local scheduler replays).

        A job with a sample workflow needs that workflow's resource name, which only the
        Pulumi program knows (`sample_workflow`); without it there is no body to send yet.
        """
        body = self.body
        if self.workflow is not None and self.workflow.sample:
            body = self.workflow.body(sample_workflow) if sample_workflow else None
        if body is None:
            return None
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class StackSettings:
    """Everything the stack deploys, already validated."""

    project: str
    region: str
    database_name: str
    runs_collection: str
    function_timeout_seconds: float
    lease_seconds: int
    retention_seconds: float
    max_instances: int
    ingress: str
    deletion_protection: bool
    job_handler: str
    jobs: tuple[JobSettings, ...]
    idempotency_collection: str = "idempotency_tokens"
    idempotency_retention_seconds: float = 604800.0

    def job_timing(self, job: JobSettings) -> JobTiming:
        """The timing facts of `job` in this stack, for `timing.check_job_timing`."""
        return JobTiming(
            schedule=job.schedule,
            attempt_deadline_seconds=job.attempt_deadline_seconds,
            function_timeout_seconds=self.function_timeout_seconds,
            lease_seconds=self.lease_seconds,
            retention_seconds=self.retention_seconds,
            retry=job.retry,
        )

    def headers_for(self, job: JobSettings) -> dict[str, str]:
        """HttpTarget headers of `job`. The local scheduler sends these same headers, so a run id
        computed locally matches the one computed in the cloud."""
        headers = {"X-Job-Project": self.project, "X-Job-Location": self.region}
        if job.body is not None or job.workflow is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def job_handlers(self) -> dict[str, str]:
        """Per-job handler overrides (JOB_HANDLERS); jobs without one use `job_handler`."""
        return {job.name: job.handler for job in self.jobs if job.handler is not None}

    def handler_of(self, job: JobSettings) -> str:
        """The handler that runs `job`: its own, else the stack's default."""
        return job.handler or self.job_handler

    def uses_workflows(self) -> bool:
        """True when some job starts Workflows executions: the runtime account then needs
        roles/workflows.invoker, and only then."""
        return any(self.handler_of(job).split(":")[0] == WORKFLOWS_HANDLER_MODULE for job in self.jobs)

    def sample_workflow_jobs(self) -> tuple[JobSettings, ...]:
        """Jobs the stack deploys a sample workflow for (and hence the token check)."""
        return tuple(job for job in self.jobs if job.sample_workflow)

    def token_check_environment(self) -> dict[str, str]:
        """The token-check function's environment, by the names function/idempotency.py and
        function/config.py read."""
        return {
            "GOOGLE_CLOUD_PROJECT": self.project,
            "FIRESTORE_DATABASE": self.database_name,
            "IDEMPOTENCY_COLLECTION": self.idempotency_collection,
            "IDEMPOTENCY_RETENTION_SECONDS": _number_text(self.idempotency_retention_seconds),
        }

    def function_environment(self) -> dict[str, str]:
        """The function's environment variables, by the names function/config.py reads."""
        env = {
            "GOOGLE_CLOUD_PROJECT": self.project,
            "FIRESTORE_DATABASE": self.database_name,
            "RUNS_COLLECTION": self.runs_collection,
            "LEASE_SECONDS": str(self.lease_seconds),
            "RETENTION_SECONDS": _number_text(self.retention_seconds),
            "JOB_HANDLER": self.job_handler,
        }
        if handlers := self.job_handlers():
            env["JOB_HANDLERS"] = json.dumps(handlers, sort_keys=True)
        return env

    def timing_advisories(self) -> list[str]:
        """Advisory timing findings (deploy anyway, but say so), phrased with config keys."""
        advisories = [
            _violation_text(violation, index, job, self)
            for index, job in enumerate(self.jobs)
            for violation in timing.check_job_timing(self.job_timing(job))
            if violation.advisory
        ]
        minimum = WORKFLOWS_CALL_TIMEOUT_SECONDS + WORKFLOWS_TIMEOUT_MARGIN_SECONDS
        if self.uses_workflows() and self.function_timeout_seconds < minimum:
            # Advisory, not an error: nothing is lost or doubled (the lease holds the run, a
            # retry takes it over, the workflow's token check stops a second state change),
            # but a slow CreateExecution is cut off by Cloud Run instead of timing out cleanly.
            advisories.append(
                f"{config_key('functionTimeoutSeconds')}: "
                f"{_number_text(self.function_timeout_seconds)}s is shorter than the Workflows call "
                f"timeout {_number_text(WORKFLOWS_CALL_TIMEOUT_SECONDS)}s + "
                f"{_number_text(WORKFLOWS_TIMEOUT_MARGIN_SECONDS)}s: Cloud Run may stop a slow "
                f"CreateExecution mid-call and leave the run to a retry; set at least {_number_text(minimum)}"
            )
        return advisories

    @classmethod
    def from_config(
        cls, values: Mapping[str, Any], *, project: str, region: str, stack: str
    ) -> StackSettings:
        """Settings from un-namespaced config `values` (camelCase keys), defaults applied.

        Raises SettingsError listing every problem at once, so one `pulumi up` shows them all.
        `stack` only appears in messages; defaults are the same for every stack.
        """
        errors: list[str] = []
        if not project:
            errors.append("gcp:project is not set (pulumi config set gcp:project <project-id>)")
        if not region:
            errors.append("gcp:region is not set (pulumi config set gcp:region <region>)")
        unknown = sorted(set(values) - set(_KEYS_BY_NAME) - {JOBS_KEY})
        errors.extend(f"{config_key(key)}: unknown config key" for key in unknown)

        scalars = {key.name: _scalar(values, key, errors) for key in CONFIG_KEYS}
        timeout = int(scalars["functionTimeoutSeconds"])
        grace = int(scalars["leaseGraceSeconds"])
        ingress = str(scalars["ingress"])
        if ingress not in INGRESS_SETTINGS:
            errors.append(f"{config_key('ingress')}: {ingress!r} is not one of {', '.join(INGRESS_SETTINGS)}")
        max_instances = int(scalars["maxInstances"])
        if max_instances < 1:
            errors.append(f"{config_key('maxInstances')}: {max_instances} must be at least 1")
        database = str(scalars["databaseName"])
        if database != "(default)" and not _DATABASE_ID.match(database):
            errors.append(
                f"{config_key('databaseName')}: {database!r} is not a Firestore database id "
                "(4-63 of a-z, 0-9, '-', starting with a letter) or '(default)'"
            )
        collection = str(scalars["runsCollection"])
        if not collection or "/" in collection or collection.startswith("__"):
            errors.append(f"{config_key('runsCollection')}: {collection!r} is not a top-level collection id")
        job_handler = str(scalars["jobHandler"])
        if not _HANDLER.match(job_handler):
            errors.append(f"{config_key('jobHandler')}: {job_handler!r} is not module:callable")
        token_collection = str(scalars["idempotencyCollection"])
        if not token_collection or "/" in token_collection or token_collection.startswith("__"):
            errors.append(
                f"{config_key('idempotencyCollection')}: {token_collection!r} "
                "is not a top-level collection id"
            )
        elif token_collection == collection:
            errors.append(
                f"{config_key('idempotencyCollection')}: {token_collection!r} is also the runsCollection; "
                "token records and run records need collections of their own"
            )
        token_retention = int(scalars["idempotencyRetentionSeconds"])
        retention = int(scalars["retentionSeconds"])
        if token_retention < retention:
            # A duplicate execution can start as late as the last retry of the run, which the
            # run record outlives by design; the token has to outlive it as well.
            errors.append(
                f"{config_key('idempotencyRetentionSeconds')}, {config_key('retentionSeconds')}: "
                f"token retention {token_retention}s is shorter than the run retention {retention}s: "
                "a late duplicate execution would find no token and change state again"
            )

        jobs = _jobs(values.get(JOBS_KEY), timeout, errors)
        _check_workflow_jobs(values.get(JOBS_KEY), jobs, job_handler, errors)
        settings = cls(
            project=project,
            region=region,
            database_name=database,
            runs_collection=collection,
            function_timeout_seconds=float(timeout),
            lease_seconds=timing.lease_for_timeout(timeout, grace),
            retention_seconds=float(scalars["retentionSeconds"]),
            max_instances=max_instances,
            ingress=ingress,
            deletion_protection=bool(scalars["deletionProtection"]),
            job_handler=job_handler,
            jobs=jobs,
            idempotency_collection=token_collection,
            idempotency_retention_seconds=float(token_retention),
        )
        if not errors:
            errors.extend(settings.timing_errors(lease_grace_seconds=grace))
        if errors:
            lines = "\n".join(f"  - {error}" for error in dict.fromkeys(errors))
            raise SettingsError(f"invalid config for stack {stack!r}:\n{lines}")
        return settings

    def timing_errors(self, *, lease_grace_seconds: float | None = None) -> list[str]:
        """Non-advisory timing violations of every job, phrased with config keys. Usable on a
        StackSettings built by hand, which is how a lease shorter than the timeout is tested."""
        return list(
            dict.fromkeys(
                _violation_text(violation, index, job, self, lease_grace_seconds)
                for index, job in enumerate(self.jobs)
                for violation in timing.check_job_timing(self.job_timing(job))
                if not violation.advisory
            )
        )


def load_stack_settings(stack: str = "dev", root: Path = REPO_ROOT) -> StackSettings:
    """Settings of `stack` straight from the YAML files, for code that runs without Pulumi
    (the local scheduler, the policy pack, tests). Project defaults come from Pulumi.yaml."""
    project_file = _read_yaml(root / "Pulumi.yaml")
    stack_file = _read_yaml(root / f"Pulumi.{stack}.yaml")
    values: dict[str, Any] = {}
    for key, schema in (project_file.get("config") or {}).items():
        name = key.removeprefix(f"{CONFIG_NAMESPACE}:")
        if isinstance(schema, Mapping) and "default" in schema:
            values[name] = schema["default"]
        elif isinstance(schema, Mapping) and "value" in schema:
            values[name] = schema["value"]
    stack_config: Mapping[str, Any] = stack_file.get("config") or {}
    for key, value in stack_config.items():
        if key.startswith(f"{CONFIG_NAMESPACE}:"):
            values[key.removeprefix(f"{CONFIG_NAMESPACE}:")] = value
    return StackSettings.from_config(
        values,
        project=str(stack_config.get("gcp:project") or ""),
        region=str(stack_config.get("gcp:region") or ""),
        stack=stack,
    )


def _read_yaml(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise SettingsError(f"{path} does not exist")
    loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(loaded, Mapping):
        raise SettingsError(f"{path} is not a YAML mapping")
    return loaded


def _scalar(values: Mapping[str, Any], key: ConfigKey, errors: list[str]) -> str | int | bool:
    value: Any = values.get(key.name, key.default)
    if value is None:
        return key.default
    # bool is an int in Python, but `true` is never a sensible number of seconds.
    if key.type == "boolean" and isinstance(value, bool):
        return value
    if key.type == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if key.type == "string" and isinstance(value, str):
        return value
    errors.append(f"{config_key(key.name)}: expected {key.type}, got {value!r}")
    return key.default


def _number(value: Any, key: str, errors: list[str], *, integer: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.append(f"{config_key(key)}: expected a number, got {value!r}")
        return None
    if integer and value != int(value):
        errors.append(f"{config_key(key)}: expected a whole number, got {value!r}")
        return None
    return float(value)


def _jobs(raw: Any, function_timeout: float, errors: list[str]) -> tuple[JobSettings, ...]:
    if raw is None or raw == []:
        errors.append(f"{config_key(JOBS_KEY)}: at least one job is required")
        return ()
    if not isinstance(raw, list):
        errors.append(f"{config_key(JOBS_KEY)}: expected a list of jobs, got {raw!r}")
        return ()
    jobs = [job for index, item in enumerate(raw) if (job := _job(item, index, function_timeout, errors))]
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.name in seen:
            errors.append(
                f"{config_key(f'jobs[{index}].name')}: {job.name!r} is already "
                f"the name of jobs[{seen[job.name]}]"
            )
        seen.setdefault(job.name, index)
    return tuple(jobs)


def _job(item: Any, index: int, function_timeout: float, errors: list[str]) -> JobSettings | None:
    prefix = f"jobs[{index}]"
    if not isinstance(item, Mapping):
        errors.append(f"{config_key(prefix)}: expected an object, got {item!r}")
        return None
    before = len(errors)
    errors.extend(f"{config_key(f'{prefix}.{key}')}: unknown job key" for key in item if key not in _JOB_KEYS)

    name = item.get("name")
    if not isinstance(name, str) or not _JOB_NAME.match(name):
        errors.append(f"{config_key(f'{prefix}.name')}: {name!r} must be 1-100 of A-Z, a-z, 0-9, '-', '_'")
    schedule = item.get("schedule")
    if not isinstance(schedule, str):
        errors.append(f"{config_key(f'{prefix}.schedule')}: expected a unix-cron string, got {schedule!r}")
    time_zone = item.get("timeZone", DEFAULT_TIME_ZONE)
    if not isinstance(time_zone, str) or not _known_time_zone(time_zone):
        errors.append(f"{config_key(f'{prefix}.timeZone')}: {time_zone!r} is not an IANA time zone")
    deadline = _number(
        item.get("attemptDeadlineSeconds", function_timeout), f"{prefix}.attemptDeadlineSeconds", errors
    )
    retry = _retry(item.get("retry", {}), f"{prefix}.retry", errors)
    body = item.get("body")
    if body is not None and not isinstance(body, Mapping):
        errors.append(f"{config_key(f'{prefix}.body')}: expected a JSON object, got {body!r}")
    handler = item.get("handler")
    if handler is not None and (not isinstance(handler, str) or not _HANDLER.match(handler)):
        errors.append(f"{config_key(f'{prefix}.handler')}: {handler!r} is not module:callable")
    workflow = _workflow(item.get("workflow"), prefix, errors) if "workflow" in item else None
    if workflow is not None:
        if body is not None:
            errors.append(
                f"{config_key(f'{prefix}.body')}: a job with a workflow sends the workflow body; "
                f"put the workflow's input in {prefix}.workflow.argument instead"
            )
        if handler is not None and handler != WORKFLOWS_HANDLER:
            errors.append(
                f"{config_key(f'{prefix}.handler')}: {handler!r} cannot start the job's workflow; "
                f"leave it out (it defaults to {WORKFLOWS_HANDLER})"
            )
        handler = WORKFLOWS_HANDLER
        if workflow.name is not None:
            body = workflow.body(workflow.name)

    if len(errors) > before or deadline is None or retry is None:
        return None
    return JobSettings(
        name=str(name),
        schedule=str(schedule),
        time_zone=str(time_zone),
        attempt_deadline_seconds=deadline,
        retry=retry,
        body=dict(body) if body is not None else None,
        handler=handler,
        workflow=workflow,
    )


def _workflow(raw: Any, prefix: str, errors: list[str]) -> WorkflowSettings | None:
    """A job's `workflow` setting: exactly one of `sample: true` or `name`, plus `argument`."""
    key = f"{prefix}.workflow"
    if not isinstance(raw, Mapping):
        errors.append(
            f"{config_key(key)}: expected an object such as {{sample: true}} or "
            f"{{name: projects/<p>/locations/<l>/workflows/<w>}}, got {raw!r}"
        )
        return None
    before = len(errors)
    errors.extend(f"{config_key(f'{key}.{k}')}: unknown workflow key" for k in raw if k not in _WORKFLOW_KEYS)
    sample = raw.get("sample", False)
    if not isinstance(sample, bool):
        errors.append(f"{config_key(f'{key}.sample')}: expected true or false, got {sample!r}")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not WORKFLOW_RESOURCE_NAME.match(name)):
        errors.append(
            f"{config_key(f'{key}.name')}: {name!r} is not projects/<project>/locations/<location>/"
            "workflows/<workflow>"
        )
    if sample is True and name is not None:
        errors.append(f"{config_key(key)}: set either sample: true or name, not both")
    elif sample is not True and name is None and len(errors) == before:
        errors.append(
            f"{config_key(key)}: set sample: true (deploy the sample workflow) or name "
            "(an existing workflow's projects/<p>/locations/<l>/workflows/<w>)"
        )
    argument = raw.get("argument")
    if argument is not None and not isinstance(argument, Mapping):
        errors.append(f"{config_key(f'{key}.argument')}: expected a JSON object, got {argument!r}")
    if len(errors) > before:
        return None
    return WorkflowSettings(
        sample=sample is True,
        name=name,
        argument=dict(argument) if argument is not None else None,
    )


def _check_workflow_jobs(
    raw: Any, jobs: tuple[JobSettings, ...], default_handler: str, errors: list[str]
) -> None:
    """A job handled by the Workflows proxy without a `workflow` setting must carry the body
    that proxy reads; a wrong body would only show up as a terminal failure at run time."""
    if not isinstance(raw, list):
        return
    indexes = {item.get("name"): index for index, item in enumerate(raw) if isinstance(item, Mapping)}
    for job in jobs:
        if job.workflow is not None or (job.handler or default_handler) != WORKFLOWS_HANDLER:
            continue
        key = config_key(f"jobs[{indexes.get(job.name, '?')}].body")
        body = job.body or {}
        workflow = body.get("workflow")
        unknown = sorted(set(body) - {"workflow", "argument"})
        if not isinstance(workflow, str) or not WORKFLOW_RESOURCE_NAME.match(workflow):
            errors.append(
                f"{key}: job {job.name!r} runs {WORKFLOWS_HANDLER}, which needs body.workflow = "
                "projects/<p>/locations/<l>/workflows/<w> (or set workflow: {sample: true} / {name: ...})"
            )
        elif unknown or not isinstance(body.get("argument", {}), Mapping):
            errors.append(
                f"{key}: job {job.name!r}: the Workflows proxy body is {{workflow, argument?: object}}, "
                f"got fields {sorted(body)}"
            )


def _retry(raw: Any, prefix: str, errors: list[str]) -> RetryConfig | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{config_key(prefix)}: expected an object, got {raw!r}")
        return None
    before = len(errors)
    errors.extend(
        f"{config_key(f'{prefix}.{key}')}: unknown retry key" for key in raw if key not in _RETRY_KEYS
    )
    fields: dict[str, float] = {}
    for key, field in _RETRY_KEYS.items():
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


def _timing_keys(field: str, index: int) -> tuple[str, ...]:
    """Config keys behind a timing.Violation field."""
    if field.startswith("retry."):
        camel = {attribute: key for key, attribute in _RETRY_KEYS.items()}[field.removeprefix("retry.")]
        return (f"jobs[{index}].retry.{camel}",)
    return {
        "schedule": (f"jobs[{index}].schedule",),
        "attempt_deadline_seconds": (f"jobs[{index}].attemptDeadlineSeconds",),
        "function_timeout_seconds": ("functionTimeoutSeconds",),
        # The lease is derived: functionTimeoutSeconds + leaseGraceSeconds.
        "lease_seconds": ("functionTimeoutSeconds", "leaseGraceSeconds"),
        "retention_seconds": ("retentionSeconds",),
    }[field]


def _violation_text(
    violation: Violation,
    index: int,
    job: JobSettings,
    settings: StackSettings,
    lease_grace_seconds: float | None = None,
) -> str:
    keys = dict.fromkeys(key for field in violation.fields for key in _timing_keys(field, index))
    text = f"{', '.join(config_key(key) for key in keys)}: job {job.name!r}: {violation.message}"
    if "lease_seconds" in violation.fields:
        grace = (
            lease_grace_seconds
            if lease_grace_seconds is not None
            else settings.lease_seconds - settings.function_timeout_seconds
        )
        text += (
            f" [lease {settings.lease_seconds}s = functionTimeoutSeconds "
            f"{_number_text(settings.function_timeout_seconds)} + leaseGraceSeconds {_number_text(grace)}]"
        )
    return text


def _number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
