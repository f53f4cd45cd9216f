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
from policy.scheduler_guardrails.rules.config.grants import (
    RUNTIME_LEDGER,
    SERVICE_MEMBER_TYPE,
    TOKEN_CHECK_LEDGER,
    Account,
    Grant,
    Scope,
)


class Identities(NamedTuple):
    runtime: gcp.serviceaccount.Account
    invoker: gcp.serviceaccount.Account
    # Only with a sample workflow or Cloud Run job: the token check's own account.
    token_check: gcp.serviceaccount.Account | None
    # Grants a request uses at once (Firestore access of the functions' accounts, ...).
    grants: list[pulumi.Resource]


def service_account(
    name: str,
    account: Account,
    title: str,
    description: str,
    settings: StackSettings,
    opts: pulumi.ResourceOptions,
) -> gcp.serviceaccount.Account:
    """One of the stack's accounts: one per job a principal does, named by its key (its id is
    unique per stack, policy/scheduler_guardrails/rules/config/names.py), its description saying what it may
    do."""
    assert account.of_the_stack, account
    return gcp.serviceaccount.Account(
        f"{name}-{account.key}",
        project=settings.project,
        account_id=settings.names.service_account_id(account.key),
        display_name=settings.names.display_name(title),
        description=description,
        opts=opts,
    )


def run_invoker(
    resource_name: str,
    grant: Grant,
    settings: StackSettings,
    service: pulumi.Input[str],
    member: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    region: str | None = None,
) -> gcp.cloudrunv2.ServiceIamMember:
    """`member`, `grant`'s account, may call the one Cloud Run service `service` (in `region`;
    None: the stack's first), nothing else in the project."""
    assert grant.scope.resource_type == SERVICE_MEMBER_TYPE, grant
    return gcp.cloudrunv2.ServiceIamMember(
        resource_name,
        project=settings.project,
        location=region or settings.region,
        name=service,
        role=grant.role,
        member=member,
        opts=opts,
    )


def identities(
    name: str, settings: StackSettings, *, parent: pulumi.Resource, iam_api: pulumi.Resource
) -> Identities:
    def account(which: Account, title: str, description: str) -> gcp.serviceaccount.Account:
        opts = pulumi.ResourceOptions(parent=parent, depends_on=[iam_api])
        return service_account(name, which, title, description, settings, opts)

    runtime = account(
        Account.RUNTIME,
        "function runtime",
        "Runs the dedup function; Firestore access limited to one database.",
    )
    invoker = account(
        Account.INVOKER,
        "job invoker",
        "Signs Cloud Scheduler's OIDC tokens; may invoke only the dedup function.",
    )
    grants: list[pulumi.Resource] = [_datastore_user(name, RUNTIME_LEDGER, settings, runtime, parent)]
    token_check = None
    if needs_token_check(settings):
        token_check = account(
            Account.TOKEN_CHECK,
            "token check",
            "Runs the token check; Firestore access limited to one database.",
        )
        grants.append(_datastore_user(name, TOKEN_CHECK_LEDGER, settings, token_check, parent))
    return Identities(runtime=runtime, invoker=invoker, token_check=token_check, grants=grants)


def _datastore_user(
    name: str,
    grant: Grant,
    settings: StackSettings,
    account: gcp.serviceaccount.Account,
    parent: pulumi.Resource,
) -> gcp.projects.IAMMember:
    """Firestore access for `account`, `grant`'s, limited by a condition to the stack's
    database (an existing one included): Firestore has no per-database IAM resource."""
    assert grant.scope is Scope.LEDGER_DATABASE, grant
    database_resource = f"projects/{settings.project}/databases/{settings.database_name}"
    return gcp.projects.IAMMember(
        f"{name}-{grant.account.key}-datastore-user",
        project=settings.project,
        role=grant.role,
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
