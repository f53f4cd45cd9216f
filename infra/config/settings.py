"""Typed, validated stack settings: the one reading of `Pulumi.yaml` + `Pulumi.<stack>.yaml`.

The Pulumi program, the local Cloud Scheduler, the policy tests and the operations tooling all
read the stack through this module, so what `make demo` fires is what `pulumi up` would deploy.
It must not import pulumi: the local tools run without the Pulumi engine.

Validation happens here, before any resource is declared, and every error names the Pulumi
config key a user has to edit (`<project>:jobs[0].attemptDeadlineSeconds`), not the Python
attribute it ended up in. The keys are declared in `Pulumi.yaml` (read by
infra/config/schema.py), the jobs' fields in infra/config/jobs.py, the run ledger's keys in
infra/config/ledger.py, the names the stack gives its resources in infra/config/names.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from exactly_once.config import (
    DATABASE_ENV,
    DEFAULT_IDEMPOTENCY_COLLECTION,
    HANDLER_PATTERN,
    JOB_HANDLER_ENV,
    JOB_HANDLERS_ENV,
    JOB_OVERLAP_ENV,
    JOB_TIME_LIMITS_ENV,
    LEASE_SECONDS_ENV,
    PROJECT_ENV,
    RETENTION_SECONDS_ENV,
    RUNS_COLLECTION_ENV,
    TIME_LIMIT_ENV,
    OverlapPolicy,
    time_limit_for_timeout,
)
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    format_rfc3339,
)
from exactly_once.targets.resource_names import WORKFLOW_RESOURCE_NAME
from exactly_once.token_check.settings import COLLECTION_ENV as TOKEN_COLLECTION_ENV
from exactly_once.token_check.settings import DEFAULT_RETENTION_SECONDS as DEFAULT_TOKEN_RETENTION_SECONDS
from exactly_once.token_check.settings import RETENTION_ENV as TOKEN_RETENTION_ENV
from infra.config.handlers import check_handlers
from infra.config.jobs import (
    AUDIT_JOB_NAME,
    WORKFLOWS_HANDLER,
    WORKFLOWS_HANDLER_MODULE,
    JobSettings,
    WorkflowSettings,
    check_workflow_jobs,
    parse_jobs,
)
from infra.config.ledger import ledger_keys
from infra.config.names import DEFAULT_COMPONENT, StackNames
from infra.config.schema import (
    CONFIG_KEYS,
    DEFAULT_DATABASE,
    FUNCTION_DIR,
    INGRESS_SETTINGS,
    JOBS_KEY,
    KEYS_BY_NAME,
    PROJECT_FILE,
    REPO_ROOT,
    ConfigKey,
    ConfigProblems,
    SettingsError,
    integer_value,
    notification_channels,
    project_name,
    read_yaml,
    scalar_value,
)
from infra.plan.needs import access_errors, jobs_environment
from infra.timing.keys import number_text, timing_advisories, timing_errors
from infra.timing.rules import JobTiming

__all__ = [
    "CONFIG_KEYS",
    "DEFAULT_DATABASE",
    "JOBS_KEY",
    "REPO_ROOT",
    "WORKFLOWS_HANDLER",
    "WORKFLOW_RESOURCE_NAME",
    "ConfigKey",
    "JobSettings",
    "SettingsError",
    "StackSettings",
    "WorkflowSettings",
    "load_stack_settings",
    "project_name",
]


@dataclass(frozen=True)
class StackSettings:
    """Everything the stack deploys, already validated."""

    project: str
    region: str
    # The stack's name and the config namespace (the Pulumi project's name): names of the
    # resources derive from the one, error messages and tools' keys from the other.
    stack: str
    config_namespace: str
    # "": the stack's own database (named by infra/config/names.py); else the configured id.
    configured_database: str
    create_database: bool
    runs_collection: str
    function_timeout_seconds: float
    lease_seconds: int
    retention_seconds: float
    max_instances: int
    ingress: str
    deletion_protection: bool
    job_handler: str
    jobs: tuple[JobSettings, ...]
    idempotency_collection: str = DEFAULT_IDEMPOTENCY_COLLECTION
    idempotency_retention_seconds: float = DEFAULT_TOKEN_RETENTION_SECONDS
    alert_notification_channels: tuple[str, ...] = ()
    missed_run_audit: bool = True
    # The component's name: __main__.py's; ExactlyOnceScheduler sets its own.
    component: str = DEFAULT_COMPONENT

    @property
    def names(self) -> StackNames:
        """The names this stack gives the resources it creates."""
        return StackNames(self.stack, self.component)

    @property
    def database_name(self) -> str:
        """The Firestore database id of the run ledger (and the token records)."""
        return self.configured_database or self.names.database_id()

    def config_key(self, key: str) -> str:
        """`key` as `pulumi config set` and `Pulumi.<stack>.yaml` spell it."""
        return f"{self.config_namespace}:{key}"

    def scheduler_job_id(self, job: JobSettings | str) -> str:
        """The deployed Cloud Scheduler job id of a configured job (given by its config name).
        The function receives it as X-CloudScheduler-JobName and keys its handler and overlap
        tables by it; users, the stack config and the operations tooling use the config name."""
        return self.names.scheduler_job_id(job if isinstance(job, str) else job.name)

    def job_named(self, name: str) -> JobSettings:
        """The job whose config `name` is `name`; SettingsError naming the jobs otherwise."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise SettingsError(
            f"no job {name!r} in stack {self.stack!r} (jobs: {', '.join(j.name for j in self.jobs)})"
        )

    @property
    def time_limit_seconds(self) -> float:
        """How long one attempt's job may run before the function ends its instance."""
        return time_limit_for_timeout(self.function_timeout_seconds)

    def job_time_limit(self, job: JobSettings) -> float:
        """How long one attempt of `job` may run: its own limit, else the function's."""
        return job.time_limit_seconds if job.time_limit_seconds is not None else self.time_limit_seconds

    def job_timing(self, job: JobSettings) -> JobTiming:
        """The timing facts of `job` in this stack, for `timing.check_job_timing`."""
        return JobTiming(
            schedule=job.schedule,
            attempt_deadline_seconds=job.attempt_deadline_seconds,
            function_timeout_seconds=self.function_timeout_seconds,
            lease_seconds=self.lease_seconds,
            retention_seconds=self.retention_seconds,
            retry=job.retry,
            time_limit_seconds=self.job_time_limit(job),
        )

    def headers_for(self, job: JobSettings) -> dict[str, str]:
        """HttpTarget headers of `job`. The local scheduler sends these same headers, so a run id
        computed locally matches the one computed in the cloud."""
        headers = {PROJECT_HEADER: self.project, LOCATION_HEADER: self.region}
        if job.body is not None or job.workflow is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def delivery_headers(self, job: JobSettings, schedule_time: datetime) -> dict[str, str]:
        """Every header Cloud Scheduler sends with a delivery of `job`'s run at `schedule_time`:
        the deployed job id, the schedule time (the same on every retry) and the HttpTarget
        headers. The local scheduler, `ops backfill` and the tests deliver with these."""
        return {
            JOB_NAME_HEADER: self.scheduler_job_id(job),
            SCHEDULE_TIME_HEADER: format_rfc3339(schedule_time),
            **self.headers_for(job),
        }

    def job_handlers(self) -> dict[str, str]:
        """Per-job handler overrides (JOB_HANDLERS); jobs without one use `job_handler`."""
        return {self.scheduler_job_id(job): job.handler for job in self.jobs if job.handler is not None}

    def job_time_limits(self) -> dict[str, float]:
        """JOB_TIME_LIMITS: the jobs whose own limit is shorter than the function's, by
        deployed job id; the others run up to JOB_TIME_LIMIT_SECONDS."""
        return {
            self.scheduler_job_id(job): limit
            for job in self.jobs
            if (limit := self.job_time_limit(job)) != self.time_limit_seconds
        }

    def job_overlap(self) -> dict[str, str]:
        """JOB_OVERLAP: the jobs that must not overlap themselves, by deployed job id; `allow`
        jobs are left out (it is the function's default)."""
        return {
            self.scheduler_job_id(job): job.overlap for job in self.jobs if job.overlap != OverlapPolicy.ALLOW
        }

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
        """The token-check function's environment, by the names exactly_once.token_check and
        exactly_once.config read."""
        return {
            PROJECT_ENV: self.project,
            DATABASE_ENV: self.database_name,
            TOKEN_COLLECTION_ENV: self.idempotency_collection,
            TOKEN_RETENTION_ENV: number_text(self.idempotency_retention_seconds),
        }

    def function_environment(self) -> dict[str, str]:
        """The function's environment variables, by the names function/exactly_once/config.py
        reads, plus the jobs' targets and settings (infra/plan/needs.py)."""
        return {**self._stack_environment(), **jobs_environment(self)}

    def _stack_environment(self) -> dict[str, str]:
        env = {
            PROJECT_ENV: self.project,
            DATABASE_ENV: self.database_name,
            RUNS_COLLECTION_ENV: self.runs_collection,
            LEASE_SECONDS_ENV: str(self.lease_seconds),
            TIME_LIMIT_ENV: number_text(self.time_limit_seconds),
            RETENTION_SECONDS_ENV: number_text(self.retention_seconds),
            JOB_HANDLER_ENV: self.job_handler,
        }
        if handlers := self.job_handlers():
            env[JOB_HANDLERS_ENV] = json.dumps(handlers, sort_keys=True)
        if overlap := self.job_overlap():
            env[JOB_OVERLAP_ENV] = json.dumps(overlap, sort_keys=True)
        if limits := self.job_time_limits():
            env[JOB_TIME_LIMITS_ENV] = json.dumps(limits, sort_keys=True)
        return env

    def timing_advisories(self) -> list[str]:
        """Advisory timing findings (deploy anyway, but say so), phrased with config keys."""
        return timing_advisories(self)

    @classmethod
    def from_config(
        cls,
        values: Mapping[str, Any],
        *,
        project: str,
        region: str,
        stack: str,
        namespace: str,
        function_dir: Path = FUNCTION_DIR,
    ) -> StackSettings:
        """Settings from un-namespaced config `values` (camelCase keys), defaults applied.

        Raises SettingsError listing every problem at once, so one `pulumi up` shows them all.
        `namespace` (the Pulumi project's name) qualifies the keys in messages; the handlers
        are checked against the source in `function_dir`.
        """
        errors = ConfigProblems(namespace)
        if not project:
            errors.append("gcp:project is not set (pulumi config set gcp:project <project-id>)")
        if not region:
            errors.append("gcp:region is not set (pulumi config set gcp:region <region>)")
        unknown = sorted(set(values) - set(KEYS_BY_NAME) - {JOBS_KEY})
        errors.extend(f"{errors.key(key)}: unknown config key" for key in unknown)

        scalars = {key.name: scalar_value(values, key, errors) for key in CONFIG_KEYS}
        timeout = int(integer_value(scalars["functionTimeoutSeconds"]))
        lease = int(integer_value(scalars["leaseSeconds"]))
        ingress = str(scalars["ingress"])
        if ingress not in INGRESS_SETTINGS:
            errors.append(f"{errors.key('ingress')}: {ingress!r} is not one of {', '.join(INGRESS_SETTINGS)}")
        max_instances = integer_value(scalars["maxInstances"])
        if max_instances < 1:
            errors.append(f"{errors.key('maxInstances')}: {max_instances} must be at least 1")
        job_handler = str(scalars["jobHandler"])
        if not HANDLER_PATTERN.match(job_handler):
            errors.append(f"{errors.key('jobHandler')}: {job_handler!r} is not module:callable")
        ledger = ledger_keys(scalars, errors)
        channels = notification_channels(scalars["alertNotificationChannels"], errors)

        jobs = parse_jobs(values.get(JOBS_KEY), timeout, errors)
        check_workflow_jobs(values.get(JOBS_KEY), jobs, job_handler, errors)
        check_handlers(job_handler, values.get(JOBS_KEY), function_dir, errors)
        errors.extend(
            f"{errors.key(f'jobs[{index}].name')}: {AUDIT_JOB_NAME!r} is the name of the stack's own "
            "missed-run audit job; choose another"
            for index, raw in enumerate(values.get(JOBS_KEY) or [])
            if isinstance(raw, Mapping) and raw.get("name") == AUDIT_JOB_NAME
        )
        try:
            StackNames(stack)
        except ValueError as error:
            errors.append(f"stack name {stack!r}: {error}")
        settings = cls(
            project=project,
            region=region,
            stack=stack or "stack",
            config_namespace=namespace,
            configured_database=ledger.database,
            create_database=ledger.create_database,
            runs_collection=ledger.runs_collection,
            function_timeout_seconds=float(timeout),
            lease_seconds=lease,
            retention_seconds=float(ledger.retention_seconds),
            max_instances=max_instances,
            ingress=ingress,
            deletion_protection=bool(scalars["deletionProtection"]),
            job_handler=job_handler,
            jobs=jobs,
            idempotency_collection=ledger.idempotency_collection,
            idempotency_retention_seconds=float(ledger.idempotency_retention_seconds),
            alert_notification_channels=channels,
            missed_run_audit=bool(scalars["missedRunAudit"]),
        )
        if not errors:
            errors.extend(access_errors(settings, settings._stack_environment()))
        if not errors:
            errors.extend(settings.timing_errors())
        if errors:
            lines = "\n".join(f"  - {error}" for error in dict.fromkeys(errors))
            raise SettingsError(f"invalid config for stack {stack!r}:\n{lines}")
        return settings

    def timing_errors(self) -> list[str]:
        """Non-advisory timing violations of every job, phrased with config keys. Usable on a
        StackSettings built by hand, which is how values the config cannot spell are tested."""
        return timing_errors(self)


def load_stack_settings(stack: str = "dev", root: Path = REPO_ROOT) -> StackSettings:
    """Settings of `stack` straight from the YAML files, for code that runs without Pulumi
    (the local scheduler, the operations tooling, tests). Project defaults come from
    Pulumi.yaml, and so does the config namespace: its `name:`."""
    project_file = read_yaml(root / PROJECT_FILE)
    namespace = project_name(root)
    stack_file = read_yaml(root / f"Pulumi.{stack}.yaml")
    values: dict[str, Any] = {}
    for key, schema in (project_file.get("config") or {}).items():
        name = key.removeprefix(f"{namespace}:")
        if isinstance(schema, Mapping) and "default" in schema:
            values[name] = schema["default"]
        elif isinstance(schema, Mapping) and "value" in schema:
            values[name] = schema["value"]
    stack_config: Mapping[str, Any] = stack_file.get("config") or {}
    for key, value in stack_config.items():
        if key.startswith(f"{namespace}:"):
            values[key.removeprefix(f"{namespace}:")] = value
    return StackSettings.from_config(
        values,
        project=str(stack_config.get("gcp:project") or ""),
        region=str(stack_config.get("gcp:region") or ""),
        stack=stack,
        namespace=namespace,
        function_dir=root / FUNCTION_DIR.name,
    )
