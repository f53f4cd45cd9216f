"""The runtime account's access beyond the ledger: one IAM member per resource-scoped grant
(infra/plan/needs.py: runtime_grants), the project roles a target kind cannot do without,
and the function's secret environment variables.

Every grant is on the resource itself (a Cloud Run job, a dataset, a secret, a topic, a
bucket), never the project, so a job that may run one Cloud Run job cannot run another, and
one that reads a dataset cannot read the next. The policy pack checks the same list
(policy/scheduler_guardrails/rules/config/access.py: GRANT_KINDS) on whatever the program declares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pulumi
import pulumi_gcp as gcp
from pulumi_gcp.cloudfunctionsv2 import (
    FunctionServiceConfigSecretEnvironmentVariableArgsDict as SecretVariable,
)

from infra.plan.needs import project_roles, runtime_grants
from infra.settings.environment import function_secrets
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.access import ResourceGrant
from policy.scheduler_guardrails.rules.config.names import stable_tag


def runtime_access(
    name: str,
    settings: StackSettings,
    member: pulumi.Input[str],
    *,
    parent: pulumi.Resource,
    created: Mapping[str, pulumi.Resource],
    apis: list[pulumi.Resource],
) -> list[pulumi.Resource]:
    """Every grant of the runtime account `member` besides Firestore. `created`
    maps a resource name the stack itself creates (a sample job, the sample dataset) to that
    resource, which its grant waits for."""
    grants: list[pulumi.Resource] = []
    for grant in runtime_grants(settings):
        after = [*apis, *([created[grant.resource]] if grant.resource in created else [])]
        opts = pulumi.ResourceOptions(parent=parent, depends_on=after)
        grants.append(_member(f"{name}-runtime-{grant.kind}-{_tag(grant)}", grant, member, opts))
    # A target kind's project roles (starting Workflows executions, creating BigQuery query
    # jobs): the services have no narrower resource to grant them on. The policy pack allows
    # exactly these roles for exactly this account (both read
    # policy/scheduler_guardrails/rules/config/grants.py).
    grants.extend(
        gcp.projects.IAMMember(
            f"{name}-runtime-{_slug(grant.role)}",
            project=settings.project,
            role=grant.role,
            member=member,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=apis),
        )
        for grant in project_roles(settings)
    )
    return grants


def _slug(role: str) -> str:
    """The IAM member's name for a project role, derived from the role so that it is stable
    across deploys: `roles/bigquery.jobUser` -> `bigquery-job-user`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", role.removeprefix("roles/")).replace(".", "-").lower()


def secret_environment_variables(settings: StackSettings) -> list[SecretVariable]:
    """The function's `secret_environment_variables`: each job's `secrets`, read by Cloud Run
    when an instance starts (never stored in the stack's config or state)."""
    return [
        {
            "key": key,
            "project_id": ref.project or settings.project,
            "secret": ref.secret,
            "version": ref.version,
        }
        for key, ref in sorted(function_secrets(settings).items())
    ]


def _tag(grant: ResourceGrant) -> str:
    """Stable per (kind, resource, role): a grant keeps its Pulumi name across deploys."""
    return stable_tag(f"{grant.kind}\0{grant.resource}\0{grant.role}", length=10)


def _member(
    resource_name: str, grant: ResourceGrant, member: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> pulumi.Resource:
    """The IAM member resource of `grant.kind` (its Pulumi type is GRANT_KINDS' resource_type)."""
    parts = grant.resource.split("/")
    role = grant.role
    if grant.kind in ("cloudRunJob", "cloudRunService"):
        # projects/P/locations/L/jobs|services/N: the same arguments for both resources.
        cloud_run_member = (
            gcp.cloudrunv2.JobIamMember if grant.kind == "cloudRunJob" else gcp.cloudrunv2.ServiceIamMember
        )
        return cloud_run_member(
            resource_name,
            project=parts[1],
            location=parts[3],
            name=parts[5],
            role=role,
            member=member,
            opts=opts,
        )
    if grant.kind == "dataset":
        project, dataset = grant.resource.split(".", 1)
        return gcp.bigquery.DatasetIamMember(
            resource_name, project=project, dataset_id=dataset, role=role, member=member, opts=opts
        )
    if grant.kind == "secret":
        return gcp.secretmanager.SecretIamMember(
            resource_name, project=parts[1], secret_id=parts[3], role=role, member=member, opts=opts
        )
    if grant.kind == "topic":
        return gcp.pubsub.TopicIAMMember(
            resource_name, project=parts[1], topic=parts[3], role=role, member=member, opts=opts
        )
    if grant.kind == "subscription":
        return gcp.pubsub.SubscriptionIAMMember(
            resource_name, project=parts[1], subscription=parts[3], role=role, member=member, opts=opts
        )
    if grant.kind == "bucket":
        return gcp.storage.BucketIAMMember(
            resource_name, bucket=grant.resource, role=role, member=member, opts=opts
        )
    raise ValueError(f"no IAM member resource for grant kind {grant.kind!r}")
