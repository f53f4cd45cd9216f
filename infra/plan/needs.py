"""What the stack's jobs need beyond the function: the APIs their targets call, the runtime
account's roles (resource-scoped `runtime_grants`, and the project roles a target kind cannot
do without), and which samples to deploy.

No Pulumi here: the policy tests and the docs read the same tables the program deploys from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from infra.config.access import SECRET_ACCESSOR, ResourceGrant
from infra.plan.catchup import catches_up
from infra.settings.environment import function_secrets
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from infra.targets.bigquery import BigQueryTarget
from infra.targets.cloud_run_job import CloudRunJobTarget
from infra.targets.kind import ProjectRole
from infra.targets.registry import kind_of

SECRET_MANAGER_API: Final = "secretmanager.googleapis.com"
# The missed-run audit's catch-up deliveries (infra/plan/catchup.py).
CLOUD_TASKS_API: Final = "cloudtasks.googleapis.com"


def sample_cloud_run_jobs(settings: StackSettings) -> tuple[JobSettings, ...]:
    return tuple(
        job for job in settings.jobs if isinstance(job.target, CloudRunJobTarget) and job.target.sample
    )


def sample_bigquery_jobs(settings: StackSettings) -> tuple[JobSettings, ...]:
    return tuple(job for job in settings.jobs if isinstance(job.target, BigQueryTarget) and job.target.sample)


def needs_token_check(settings: StackSettings) -> bool:
    """The stack deploys the token check for its sample workflows and sample Cloud Run jobs."""
    return bool(settings.sample_workflow_jobs() or sample_cloud_run_jobs(settings))


def project_roles(settings: StackSettings) -> tuple[ProjectRole, ...]:
    """The runtime account's project roles: those of the target kinds some job uses."""
    return tuple(role for kind in settings.kinds_used() for role in kind.project_roles)


def extra_apis(settings: StackSettings) -> tuple[str, ...]:
    """APIs the jobs' targets and needs use, enabled only when some job does."""
    apis = [api for kind in settings.kinds_used() for api in kind.apis]
    if function_secrets(settings) or any(g.kind == "secret" for g in runtime_grants(settings)):
        apis.append(SECRET_MANAGER_API)
    if catches_up(settings):
        apis.append(CLOUD_TASKS_API)
    return tuple(apis)


def runtime_grants(settings: StackSettings) -> tuple[ResourceGrant, ...]:
    """Every resource-scoped role of the runtime account: its targets', its secrets' and the
    jobs' declared `grants`, once each, in a stable order."""
    return tuple(sorted(set(_grants(settings))))


def _grants(settings: StackSettings) -> Iterator[ResourceGrant]:
    for job in settings.jobs:
        if job.target is not None:
            yield from kind_of(job.target).grants(job.target, job.name, settings.placement)
        for ref in job.access.secrets.values():
            yield ResourceGrant("secret", ref.resource(settings.project), SECRET_ACCESSOR)
        yield from job.access.grants
