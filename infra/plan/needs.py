"""The stack's jobs' targets and needs, taken together: what the function's environment says
(CLOUD_RUN_JOBS, BIGQUERY_JOBS, the jobs' `env` and `secrets`), which resource-scoped grants
the runtime account gets (`runtime_grants`), and the conflicts only the whole stack shows (two
jobs setting one variable differently, an environment over Cloud Run's limit).

No Pulumi here: the local scheduler and the policy tests read the same tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from exactly_once.audit.config import AUDIT_JOBS_ENV
from exactly_once.targets.endpoints import ENDPOINT_VARIABLES
from exactly_once.targets.job_specs import (
    BIGQUERY_HANDLER,
    BIGQUERY_JOBS_ENV,
    CLOUD_RUN_HANDLER,
    CLOUD_RUN_JOBS_ENV,
    BigQueryJobSpec,
    CloudRunJobSpec,
    render_table,
)
from infra.config.access import (
    CLOUD_RUN_TARGET_ROLES,
    DATASET_ROLES,
    SECRET_ACCESSOR,
    ResourceGrant,
    SecretReference,
)
from infra.targets.kinds import BigQueryTarget, CloudRunJobTarget

if TYPE_CHECKING:
    from infra.config.jobs import JobSettings
    from infra.config.settings import StackSettings

BIGQUERY_API: Final = "bigquery.googleapis.com"
SECRET_MANAGER_API: Final = "secretmanager.googleapis.com"
# Cloud Run functions: all runtime environment variable names and values together.
MAX_ENVIRONMENT_BYTES: Final = 32 * 1024
# Set by the function's test harnesses and switches: a job's `env` may not take them either.
_FUNCTION_SWITCHES: Final = frozenset({*ENDPOINT_VARIABLES, "DOWNSTREAM_ID_TOKEN_DISABLED", AUDIT_JOBS_ENV})


def cloud_run_job_resource(settings: StackSettings, job: JobSettings) -> str:
    assert isinstance(job.target, CloudRunJobTarget)
    sample = settings.names.cloud_run_job_name(job.name)
    return job.target.resource_name(settings.project, settings.region, sample)


def sample_table(settings: StackSettings, job: JobSettings) -> str:
    """`<project>.<dataset>.<table>` a sample BigQuery job appends its runs to."""
    return (
        f"{settings.project}.{settings.names.sample_dataset_id()}.{settings.names.sample_table_id(job.name)}"
    )


def cloud_run_jobs(settings: StackSettings) -> dict[str, CloudRunJobSpec]:
    """CLOUD_RUN_JOBS: each Cloud Run job target, by deployed scheduled job id."""
    return {
        settings.scheduler_job_id(job): job.target.spec(cloud_run_job_resource(settings, job))
        for job in settings.jobs
        if isinstance(job.target, CloudRunJobTarget)
    }


def bigquery_jobs(settings: StackSettings) -> dict[str, BigQueryJobSpec]:
    """BIGQUERY_JOBS: each BigQuery target, by deployed scheduled job id."""
    return {
        settings.scheduler_job_id(job): job.target.spec(
            settings.project, settings.region, sample_table(settings, job)
        )
        for job in settings.jobs
        if isinstance(job.target, BigQueryTarget)
    }


def sample_cloud_run_jobs(settings: StackSettings) -> tuple[JobSettings, ...]:
    return tuple(
        job for job in settings.jobs if isinstance(job.target, CloudRunJobTarget) and job.target.sample
    )


def sample_bigquery_jobs(settings: StackSettings) -> tuple[JobSettings, ...]:
    return tuple(job for job in settings.jobs if isinstance(job.target, BigQueryTarget) and job.target.sample)


def needs_token_check(settings: StackSettings) -> bool:
    """The stack deploys the token check for its sample workflows and sample Cloud Run jobs."""
    return bool(settings.sample_workflow_jobs() or sample_cloud_run_jobs(settings))


def uses_bigquery(settings: StackSettings) -> bool:
    return any(settings.handler_of(job) == BIGQUERY_HANDLER for job in settings.jobs)


def function_secrets(settings: StackSettings) -> dict[str, SecretReference]:
    """Every job's `secrets`, as the function's secret environment variables."""
    return {name: ref for job in settings.jobs for name, ref in job.access.secrets.items()}


def jobs_environment(settings: StackSettings) -> dict[str, str]:
    """What the jobs add to the function's environment: their targets' tables and `env`."""
    env = {name: value for job in settings.jobs for name, value in job.access.env.items()}
    if cloud_run := cloud_run_jobs(settings):
        env[CLOUD_RUN_JOBS_ENV] = render_table(cloud_run)
    if bigquery := bigquery_jobs(settings):
        env[BIGQUERY_JOBS_ENV] = render_table(bigquery)
    return env


def extra_apis(settings: StackSettings) -> tuple[str, ...]:
    """APIs the jobs' targets and needs use, enabled only when some job does."""
    apis = [BIGQUERY_API] if uses_bigquery(settings) else []
    if function_secrets(settings) or any(g.kind == "secret" for g in runtime_grants(settings)):
        apis.append(SECRET_MANAGER_API)
    return tuple(apis)


def runtime_grants(settings: StackSettings) -> tuple[ResourceGrant, ...]:
    """Every resource-scoped role of the runtime account: its targets', its secrets' and the
    jobs' declared `grants`, once each, in a stable order."""
    return tuple(sorted(set(_grants(settings))))


def _grants(settings: StackSettings) -> Iterator[ResourceGrant]:
    for job in settings.jobs:
        if isinstance(job.target, CloudRunJobTarget):
            resource = cloud_run_job_resource(settings, job)
            yield from (ResourceGrant("cloudRunJob", resource, role) for role in CLOUD_RUN_TARGET_ROLES)
        elif isinstance(job.target, BigQueryTarget):
            for dataset in job.target.datasets(sample_table(settings, job)):
                yield ResourceGrant("dataset", dataset["dataset"], DATASET_ROLES[dataset["access"]])
        for ref in job.access.secrets.values():
            yield ResourceGrant("secret", ref.resource(settings.project), SECRET_ACCESSOR)
        yield from job.access.grants


def access_errors(settings: StackSettings, stack_env: dict[str, str]) -> list[str]:
    """What only the whole stack shows, phrased with config keys: a job's handler that needs a
    target it lacks, one variable set two ways, a name the stack sets itself, and an
    environment over Cloud Run's limit. `stack_env` is what the stack sets besides the jobs."""
    key = settings.config_key
    errors: list[str] = []
    owners: dict[str, tuple[str, object]] = {}
    for index, job in enumerate(settings.jobs):
        handler = settings.handler_of(job)
        for needed, target, field in (
            (CLOUD_RUN_HANDLER, CloudRunJobTarget, "cloudRunJob"),
            (BIGQUERY_HANDLER, BigQueryTarget, "bigquery"),
        ):
            if handler == needed and not isinstance(job.target, target):
                where = f"jobs[{index}].handler" if job.handler else "jobHandler"
                errors.append(
                    f"{key(where)}: {needed} runs a job's {field} setting; set jobs[{index}].{field}"
                )
        named: list[tuple[str, object]] = [(f"env.{n}", v) for n, v in job.access.env.items()]
        named += [(f"secrets.{n}", ref) for n, ref in job.access.secrets.items()]
        for field, value in named:
            name = field.split(".", 1)[1]
            here = key(f"jobs[{index}].{field}")
            if name in stack_env or name in _FUNCTION_SWITCHES:
                errors.append(f"{here}: {name} is a variable the function itself reads; choose another name")
            elif name in owners and owners[name][1] != value:
                errors.append(
                    f"{here}: {name} is also {owners[name][0]} with another value; one function serves "
                    "every job, so a variable has one value (prefix it with the job's name)"
                )
            owners.setdefault(name, (key(f"jobs[{index}].{field}"), value))
    env = {**stack_env, **jobs_environment(settings)}
    size = sum(len(n.encode()) + len(v.encode()) for n, v in env.items())
    size += sum(len(name.encode()) for name in function_secrets(settings))
    if size > MAX_ENVIRONMENT_BYTES:
        largest = max(env, key=lambda name: len(env[name]))
        errors.append(
            f"{key('jobs')}: the function's environment would be {size} bytes, over Cloud Run's "
            f"{MAX_ENVIRONMENT_BYTES}; the largest variable is {largest} ({len(env[largest])} bytes). "
            "Keep long queries in a view or stored procedure and call that."
        )
    return errors
