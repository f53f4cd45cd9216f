"""Who GitHub Actions may act as: which workflow runs may impersonate each of the stack's
accounts (roles/iam.workloadIdentityUser grants to workload identity pool principals), and
ci-read-only-outside-deploys, the rule that an account a pull request or a branch can reach
holds no role that writes.

A pull request's workflow runs whatever its branch says, so anything the account it runs as
may do, anyone who can push a branch may do. The deployer is for the default branch's
deployment jobs only (rules/config/github_oidc.py); every other CI account reads.

The rule sees who may impersonate an account only where the grant that allows it is made: in
the bootstrap stack. In the main stack the CI previewer is one more account the stack did not
create, which grants-to-own-accounts-only (outside.py) keeps every role from.
"""

from __future__ import annotations

from collections.abc import Iterable

from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs

from ..engine.grants import PROJECT_MEMBER_PREFIX, account_email, iam_grants
from ..engine.props import UNKNOWN, Absent, lookup
from ..engine.types import is_iam_type
from ..rules.config.deployer_roles import PREVIEWER_ROLES
from ..rules.config.github_oidc import WORKLOAD_IDENTITY_USER, Reach, reach

# What an account any branch or pull request may impersonate may hold: the previewer's roles.
READ_ONLY_ROLES = frozenset(role.role for role in PREVIEWER_ROLES)
# A grant of workloadIdentityUser to something that is no pool principal (a user, a group).
_OUTSIDE_THE_POOL = "outside the pool"


def _impersonation(resources: Iterable[PolicyResource]) -> dict[str, set[Reach | str]] | Absent:
    """Per account email (lower-case): what the members that may impersonate it admit, or
    UNKNOWN when a grant is not known yet (preview: pool names carry the project number)."""
    found: dict[str, set[Reach | str]] = {}
    for resource in resources:
        kind = resource.resource_type
        if not (kind.startswith("gcp:serviceaccount/") and is_iam_type(kind)):
            continue
        account = lookup(resource.props, "serviceAccountId")
        for grant in iam_grants(resource.props):
            if grant.role is UNKNOWN or account is UNKNOWN or UNKNOWN in grant.members:
                return Absent.UNKNOWN
            if grant.role != WORKLOAD_IDENTITY_USER or not isinstance(account, str):
                continue
            kinds = found.setdefault(account_email(account), set())
            for member in grant.members:
                if isinstance(member, str):
                    kinds.add(reach(member) or _OUTSIDE_THE_POOL)
    return found


def _accounts_reached_only_by(resources: Iterable[PolicyResource], kind: Reach) -> set[str] | Absent:
    impersonation = _impersonation(resources)
    if isinstance(impersonation, Absent):
        return impersonation
    return {email for email, kinds in impersonation.items() if kinds == {kind}}


def ci_deployer_accounts(resources: Iterable[PolicyResource]) -> set[str] | Absent:
    """Accounts only deployment-environment jobs may impersonate (each principal one `sub`)."""
    return _accounts_reached_only_by(resources, Reach.ENVIRONMENT)


def ci_previewer_accounts(resources: Iterable[PolicyResource]) -> set[str] | Absent:
    """Accounts only pull request jobs (naming no environment) may impersonate."""
    return _accounts_reached_only_by(resources, Reach.PULL_REQUEST)


def validate_ci_read_only(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Every grant to an account that a pull request's or any branch's jobs may impersonate
    names a read-only role."""
    resources = list(args.resources)
    impersonation = _impersonation(resources)
    if isinstance(impersonation, Absent):
        return
    reachable = {
        email: sorted(kind.value for kind in kinds if kind in (Reach.PULL_REQUEST, Reach.BROADER))
        for email, kinds in impersonation.items()
        if kinds & {Reach.PULL_REQUEST, Reach.BROADER}
    }
    allowed = ", ".join(sorted(READ_ONLY_ROLES))
    for resource in resources:
        if not is_iam_type(resource.resource_type):
            continue
        for grant in iam_grants(resource.props):
            if not isinstance(grant.role, str) or grant.role in READ_ONLY_ROLES:
                continue
            for member in grant.members:
                if not (isinstance(member, str) and member.startswith(PROJECT_MEMBER_PREFIX)):
                    continue
                email = member.removeprefix(PROJECT_MEMBER_PREFIX).strip().lower()
                if email not in reachable:
                    continue
                report_violation(
                    f"{resource.resource_type} '{resource.name}': {grant.role} is granted to '{member}', "
                    f"which {' and '.join(reachable[email])} may impersonate. Such an account runs "
                    f"whatever a branch's workflow says, so it may hold only read roles ({allowed}). "
                    "Grant writing roles to the deployer, which only the default branch's deployment "
                    "jobs may impersonate (docs/ci.md).",
                    resource.urn,
                )
