"""StackSettings: everything one stack deploys, as typed values, already validated.

Data and what follows from the data alone (names, limits, tables keyed by deployed job id).
Reading the YAML and checking it is infra/settings/loading.py; what the values render into
(the function's environment, the Scheduler jobs' headers) is infra/settings/environment.py and
infra/plan/. No Pulumi: the local tools read the same settings without the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactly_once.config import DEFAULT_IDEMPOTENCY_COLLECTION, OverlapPolicy, time_limit_for_timeout
from exactly_once.token_check.settings import DEFAULT_RETENTION_SECONDS as DEFAULT_TOKEN_RETENTION_SECONDS
from infra.config.labels import STACK_LABEL
from infra.settings.jobs import JobSettings
from policy.scheduler_guardrails.rules.config.names import COMPONENT_NAME, StackNames
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.targets.kind import Placement, TargetKind
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS, kind_for_handler, kind_of
from policy.scheduler_guardrails.rules.timing.rules import JobTiming


@dataclass(frozen=True)
class StackSettings:
    """Everything the stack deploys, already validated."""

    project: str
    region: str
    # The stack's name and the config namespace (the Pulumi project's name): names of the
    # resources derive from the one, error messages and tools' keys from the other.
    stack: str
    config_namespace: str
    # "": the stack's own database (named by policy/scheduler_guardrails/rules/config/names.py);
    # else the configured id.
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
    # The name of the component that deploys these settings: the first part of every name.
    component: str = COMPONENT_NAME
    # "": one region. Else a second region that deploys the function and every Scheduler job
    # too (infra/settings/region_checks.py says what it requires).
    second_region: str = ""
    # "": the database is in `region`, as it always was. Else its Firestore location.
    database_location: str = ""
    # "": no move. Else '<database>/<collection>', the run ledger's place before this update
    # (infra/settings/kept_settings.py): the one update that moves a copied ledger may change them.
    ledger_moved_from: str = ""
    # The fork's own labels (`labels`, infra/settings/label_checks.py), in config order.
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> StackNames:
        """The names this stack's component gives the resources it creates."""
        return StackNames(self.stack, self.component)

    @property
    def resource_labels(self) -> dict[str, str]:
        """The labels of every resource the stack creates that can carry labels: the stack's
        own, `eos-stack: <stack name>`, and the fork's."""
        return {STACK_LABEL: self.names.stack_label(), **dict(self.labels)}

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region the function and the Scheduler jobs are deployed in, `region` first."""
        return (self.region, self.second_region) if self.second_region else (self.region,)

    @property
    def run_location(self) -> str:
        """The location every delivery names in X-Job-Location, from whichever region it comes:
        the run id hashes it, so both regions' deliveries of a run must name the same one, and
        it is `region` so that adding a second region changes no run id."""
        return self.region

    @property
    def ledger_location(self) -> str:
        """The Firestore location of the stack's own database."""
        return self.database_location or self.region

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

    def run_key_id(self, job: JobSettings) -> str:
        """What the function keys `job`'s runs and status by, and the audit its history: the id a
        Scheduler job named after its runKey would have, so that without one it is the job's
        own id (scheduler_job_id), the one every run id was computed from before runKey."""
        return self.names.scheduler_job_id(job.key_name)

    def job_run_keys(self) -> dict[str, str]:
        """The job table's run keys: the jobs keyed by something other than their own deployed
        id, by deployed job id; the others are keyed by it, as the function does by default."""
        return {
            self.scheduler_job_id(job): key
            for job in self.jobs
            if (key := self.run_key_id(job)) != self.scheduler_job_id(job)
        }

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
            starting_deadline_seconds=job.starting_deadline_seconds,
            time_zone=job.time_zone,
        )

    def job_handlers(self) -> dict[str, str]:
        """Per-job handler overrides (the job table's handlers); jobs without one use `job_handler`."""
        return {self.scheduler_job_id(job): job.handler for job in self.jobs if job.handler is not None}

    def job_time_limits(self) -> dict[str, float]:
        """The job table's time limits: the jobs whose own limit is shorter than the function's, by
        deployed job id; the others run up to JOB_TIME_LIMIT_SECONDS."""
        return {
            self.scheduler_job_id(job): limit
            for job in self.jobs
            if (limit := self.job_time_limit(job)) != self.time_limit_seconds
        }

    def job_starting_deadlines(self) -> dict[str, float]:
        """The job table's starting deadlines: the jobs with a startingDeadlineSeconds, by deployed job id."""
        return {
            self.scheduler_job_id(job): job.starting_deadline_seconds
            for job in self.jobs
            if job.starting_deadline_seconds is not None
        }

    def job_overlap(self) -> dict[str, str]:
        """The job table's overlap policies: the jobs that must not overlap themselves, by
        deployed job id; `allow` jobs are left out (it is the function's default)."""
        return {
            self.scheduler_job_id(job): job.overlap for job in self.jobs if job.overlap != OverlapPolicy.ALLOW
        }

    def handler_of(self, job: JobSettings) -> str:
        """The handler that runs `job`: its own, else the stack's default."""
        return job.handler or self.job_handler

    def scheduled_body(self, job: JobSettings) -> bytes | None:
        """The exact body Cloud Scheduler sends with every delivery of `job` (None: no body).
        A body that names the sample the stack deploys for the job (a sample workflow) names it
        as the program does, so its bytes are known before any resource exists."""
        sample = None
        if job.sample_workflow and job.target is not None:
            sample = kind_of(job.target).sample_resource(job.name, self.placement)
        return job.body_bytes(sample)

    @property
    def placement(self) -> Placement:
        """Where the stack deploys, as the target kinds name their downstream resources."""
        return Placement(self.project, self.region, self.names)

    def kinds_used(self) -> tuple[TargetKind, ...]:
        """The target kinds some job runs the proxy of (by handler, with or without a target
        setting): their APIs are enabled and their project roles granted, and only then."""
        used = {kind_for_handler(self.handler_of(job)) for job in self.jobs}
        return tuple(kind for kind in TARGET_KINDS if kind in used)

    def sample_workflow_jobs(self) -> tuple[JobSettings, ...]:
        """Jobs the stack deploys a sample workflow for (and hence the token check)."""
        return tuple(job for job in self.jobs if job.sample_workflow)
