"""grants-to-own-accounts-only: a stack grants roles only to the service accounts it creates,
or to outside accounts OUTSIDE_ACCOUNT_GRANTS lists for them.

An outside account's powers are not this stack's to extend: it may be the CI previewer, which
a pull request's workflow runs as, or the deployer. In the main stack, which holds no grant
letting CI impersonate anyone, this is the rule that keeps every role from the previewer,
whatever the account is called.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs

from ..engine.grants import PROJECT_MEMBER_PREFIX, iam_grants
from ..engine.props import Absent, lookup
from ..engine.types import SERVICE_ACCOUNT, is_iam_type, resources_of


class OutsideGrant(NamedTuple):
    """A service account the stack does not create that may still be granted `roles` here."""

    # The email, matched whole and lower-case: r"service-\d+@gcp-sa-pubsub\.iam\.gserviceaccount\.com".
    account: re.Pattern[str]
    roles: frozenset[str]
    reason: str


# The outside accounts a fork grants roles to, each with its reason (docs/policy.md). None in
# the shipped stacks: the CI accounts get their roles from the bootstrap, never from a stack.
OUTSIDE_ACCOUNT_GRANTS: tuple[OutsideGrant, ...] = ()


def _own_accounts(resources: Iterable[PolicyResource]) -> set[str] | Absent:
    """The emails (lower-case) of the service accounts the stack creates, or UNKNOWN when one
    cannot be told yet. In a first preview an account's email is unknown, but its id and
    project, which make the email, are inputs."""
    emails: set[str] = set()
    for account in resources_of(resources, SERVICE_ACCOUNT):
        email = lookup(account.props, "email")
        if not isinstance(email, str):
            account_id, project = lookup(account.props, "accountId"), lookup(account.props, "project")
            if not (isinstance(account_id, str) and isinstance(project, str)):
                return Absent.UNKNOWN
            email = f"{account_id}@{project}.iam.gserviceaccount.com"
        emails.add(email.strip().lower())
    return emails


def _allowed_outside(email: str, role: object) -> bool:
    return any(entry.account.fullmatch(email) and role in entry.roles for entry in OUTSIDE_ACCOUNT_GRANTS)


def validate_grants_to_own_accounts(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Every role granted to a service account goes to one the stack creates, or to one
    OUTSIDE_ACCOUNT_GRANTS lists for that role. An outside account's powers are not this
    stack's to extend: it may be the CI previewer, which a pull request's workflow runs as."""
    resources = list(args.resources)
    own = _own_accounts(resources)
    if isinstance(own, Absent):
        return
    for resource in resources:
        if not is_iam_type(resource.resource_type):
            continue
        for grant in iam_grants(resource.props):
            for member in grant.members:
                if not (isinstance(member, str) and member.startswith(PROJECT_MEMBER_PREFIX)):
                    continue
                email = member.removeprefix(PROJECT_MEMBER_PREFIX).strip().lower()
                if email in own or _allowed_outside(email, grant.role):
                    continue
                role = grant.role if isinstance(grant.role, str) else "a role"
                report_violation(
                    f"{resource.resource_type} '{resource.name}': {role} is granted to '{member}', "
                    "a service account this stack does not create. An outside account's powers are "
                    "not this stack's to extend: it may be the CI previewer, which a pull request's "
                    "workflow runs as, or the deployer. Grant the role to one of the stack's own "
                    "accounts; for an account that must hold it (a Google service agent, say), add "
                    "the account and the role, with the reason, to OUTSIDE_ACCOUNT_GRANTS in "
                    "policy/scheduler_guardrails/identities/outside.py (docs/policy.md).",
                    resource.urn,
                )
