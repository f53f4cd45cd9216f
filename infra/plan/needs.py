"""What the stack's jobs need beyond the function: the APIs their targets call, the runtime
account's roles (resource-scoped `runtime_grants`, and the project roles a target kind cannot
do without), and which samples to deploy.

No Pulumi here: the policy tests and the docs read the same tables the program deploys from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from infra.plan.catchup import catches_up
from infra.settings.environment import function_secrets
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.access import ResourceGrant
from policy.scheduler_guardrails.rules.config.grants import (
    SECRET_ACCESSOR,
    STACK_GRANTS,
    Account,
    Grant,
    Scope,
)
from policy.scheduler_guardrails.rules.targets.kind import TargetKind
from policy.scheduler_guardrails.rules.targets.registry import kind_of

SECRET_MANAGER_API: Final = "secretmanager.googleapis.com"
# The missed-run audit's catch-up deliveries (infra/plan/catchup.py).
CLOUD_TASKS_API: Final = "cloudtasks.googleapis.com"


def _samples(settings: StackSettings) -> Iterator[tuple[JobSettings, TargetKind]]:
    """Each job whose target is the stack's sample, with its kind."""
    for job in settings.jobs:
        if job.target is not None and kind_of(job.target).is_sample(job.target):
            yield job, kind_of(job.target)


def sample_jobs(settings: StackSettings, key: str) -> tuple[JobSettings, ...]:
    """The jobs whose target of the kind with config key `key` is the stack's sample."""
    return tuple(job for job, kind in _samples(settings) if kind.key == key)


def needs_token_check(settings: StackSettings) -> bool:
    """The stack deploys the token check for its samples that call it (a sample workflow, a
    sample Cloud Run job's container)."""
    return any(kind.sample_calls_token_check for _, kind in _samples(settings))


def token_check_called_from_outside(settings: StackSettings) -> bool:
    """Whether a sample calls the token check from outside any VPC network (a Cloud Run job's
    container), which its internal-only ingress would refuse."""
    return any(kind.sample_calls_from_outside_network for _, kind in _samples(settings))


def project_roles(settings: StackSettings) -> tuple[Grant, ...]:
    """The runtime account's project roles for the target kinds some job uses (grants.py's
    project rows made for a kind: the services have no narrower resource to grant them on)."""
    used = {kind.key for kind in settings.kinds_used()}
    return tuple(
        grant
        for grant in STACK_GRANTS
        if grant.account is Account.RUNTIME and grant.scope is Scope.PROJECT and used & set(grant.kinds)
    )


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
            yield ResourceGrant("secret", ref.resource(settings.project), SECRET_ACCESSOR.role)
        yield from job.access.grants
