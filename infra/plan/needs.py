"""What the stack's jobs need beyond the function: the APIs their targets call, the
resource-scoped grants of the runtime account (`runtime_grants`), and which samples to deploy.

No Pulumi here: the policy tests and the docs read the same tables the program deploys from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from exactly_once.audit.config import AUDIT_JOBS_ENV
from exactly_once.targets.endpoints import ENDPOINT_VARIABLES
from exactly_once.targets.job_specs import (
    BIGQUERY_HANDLER,
)
from infra.config.access import (
    CLOUD_RUN_TARGET_ROLES,
    DATASET_ROLES,
    SECRET_ACCESSOR,
    ResourceGrant,
)
from infra.settings.environment import cloud_run_job_resource, function_secrets, sample_table
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from infra.targets.kinds import BigQueryTarget, CloudRunJobTarget

BIGQUERY_API: Final = "bigquery.googleapis.com"
SECRET_MANAGER_API: Final = "secretmanager.googleapis.com"
# Cloud Run functions: all runtime environment variable names and values together.
MAX_ENVIRONMENT_BYTES: Final = 32 * 1024
# Set by the function's test harnesses and switches: a job's `env` may not take them either.
_FUNCTION_SWITCHES: Final = frozenset({*ENDPOINT_VARIABLES, "DOWNSTREAM_ID_TOKEN_DISABLED", AUDIT_JOBS_ENV})


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
