"""The stack's runtime identities and the grants they serve requests with.

One account per job a principal does: the scheduled function may use Firestore (and start
workflows when a job needs it), the invoker may only invoke, the token check may only use
Firestore. The build's account lives with the build (infra/resources/build.py), the sample workflows'
with them (infra/samples/workflows.py).
"""

from __future__ import annotations

from typing import NamedTuple

import pulumi
import pulumi_gcp as gcp

from infra.plan.needs import needs_token_check
from infra.settings.stack import StackSettings


class Identities(NamedTuple):
    runtime: gcp.serviceaccount.Account
    invoker: gcp.serviceaccount.Account
    # Only with a sample workflow or Cloud Run job: the token check's own account.
    token_check: gcp.serviceaccount.Account | None
    # Grants a request uses at once (Firestore access of the functions' accounts, ...).
    grants: list[pulumi.Resource]


def service_account(
    name: str,
    role: str,
    title: str,
    description: str,
    settings: StackSettings,
    opts: pulumi.ResourceOptions,
) -> gcp.serviceaccount.Account:
    """One of the stack's accounts: one per job a principal does, named by `role` (its id is
    unique per stack, infra/config/names.py), its description saying what it may do."""
    return gcp.serviceaccount.Account(
        f"{name}-{role}",
        project=settings.project,
        account_id=settings.names.service_account_id(role),
        display_name=settings.names.display_name(title),
        description=description,
        opts=opts,
    )


def run_invoker(
    resource_name: str,
    settings: StackSettings,
    service: pulumi.Input[str],
    member: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    region: str | None = None,
) -> gcp.cloudrunv2.ServiceIamMember:
    """`member` may call the one Cloud Run service `service` (in `region`; None: the stack's
    first), nothing else in the project."""
    return gcp.cloudrunv2.ServiceIamMember(
        resource_name,
        project=settings.project,
        location=region or settings.region,
        name=service,
        role="roles/run.invoker",
        member=member,
        opts=opts,
    )


def identities(
    name: str, settings: StackSettings, *, parent: pulumi.Resource, iam_api: pulumi.Resource
) -> Identities:
    def account(role: str, title: str, description: str) -> gcp.serviceaccount.Account:
        opts = pulumi.ResourceOptions(parent=parent, depends_on=[iam_api])
        return service_account(name, role, title, description, settings, opts)

    runtime = account(
        "runtime", "function runtime", "Runs the dedup function; Firestore access limited to one database."
    )
    invoker = account(
        "invoker", "job invoker", "Signs Cloud Scheduler's OIDC tokens; may invoke only the dedup function."
    )
    grants: list[pulumi.Resource] = [_datastore_user(name, "runtime", settings, runtime, parent)]
    token_check = None
    if needs_token_check(settings):
        token_check = account(
            "tokens", "token check", "Runs the token check; Firestore access limited to one database."
        )
        grants.append(_datastore_user(name, "tokens", settings, token_check, parent))
    return Identities(runtime=runtime, invoker=invoker, token_check=token_check, grants=grants)


def _datastore_user(
    name: str,
    role: str,
    settings: StackSettings,
    account: gcp.serviceaccount.Account,
    parent: pulumi.Resource,
) -> gcp.projects.IAMMember:
    """Firestore access for `account`, limited by a condition to the stack's database (an
    existing one included): Firestore has no per-database IAM resource."""
    database_resource = f"projects/{settings.project}/databases/{settings.database_name}"
    return gcp.projects.IAMMember(
        f"{name}-{role}-datastore-user",
        project=settings.project,
        role="roles/datastore.user",
        member=account.member,
        condition={
            "title": f"only-{settings.database_name}"[:100],
            "description": "Firestore access limited to the run ledger database of this stack.",
            # The exact database or its documents; a mere prefix would also match
            # "<name>-other" databases.
            "expression": (
                f'resource.name == "{database_resource}" || resource.name.startsWith("{database_resource}/")'
            ),
        },
        opts=pulumi.ResourceOptions(parent=parent),
    )
