"""The roles the identity that runs `pulumi up` needs on a fresh project, each with its reason,
and the read-only roles of the CI previewer that runs `pulumi preview` for pull requests: the
views of grants.py's CI rows that the docs, the policy pack and bootstrap/ read.

DEPLOYER_ROLES are what every stack needs; GRANT_KIND_ROLES the few only some stacks need,
granted per the bootstrap's `jobGrants`. They live in infra/config/, not in bootstrap/, because
a deployer made by hand needs the same roles: a fork that deletes bootstrap/ keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

from .grants import ALWAYS, DEPLOYER_GRANTS, PREVIEWER_GRANTS, Scope


class DeployerRole(NamedTuple):
    role: str
    reason: str


DEPLOYER_ROLES: Final[tuple[DeployerRole, ...]] = tuple(
    DeployerRole(grant.role, grant.why)
    for grant in DEPLOYER_GRANTS
    if grant.scope is Scope.PROJECT and grant.when == (ALWAYS,)
)


# What the deployer needs only when the stacks' jobs are granted a role on a resource of one
# of these kinds (the bootstrap key `jobGrants`), by kind.
GRANT_KIND_ROLES: Final[Mapping[str, DeployerRole]] = MappingProxyType(
    {
        when.job_grant: DeployerRole(grant.role, grant.why)
        for grant in DEPLOYER_GRANTS
        for when in grant.when
        if when.job_grant is not None
    }
)


def deployer_roles(job_grants: Iterable[str] = ()) -> tuple[DeployerRole, ...]:
    """DEPLOYER_ROLES, and the role of each kind in `job_grants` (each role once)."""
    extra: dict[str, DeployerRole] = {}
    for kind in job_grants:
        role = GRANT_KIND_ROLES[kind]
        extra.setdefault(role.role, role)
    return (*DEPLOYER_ROLES, *extra.values())


class PreviewerRole(NamedTuple):
    role: str
    # Where the bootstrap grants it: the project, the state bucket or the secrets key.
    scope: str
    reason: str


PROJECT_SCOPE = "project"
STATE_BUCKET_SCOPE = "state bucket"
SECRETS_KEY_SCOPE = "secrets key"
_SCOPE_LABELS: Final = {
    Scope.PROJECT: PROJECT_SCOPE,
    Scope.STATE_BUCKET: STATE_BUCKET_SCOPE,
    Scope.SECRETS_KEY: SECRETS_KEY_SCOPE,
}

PREVIEWER_ROLES: Final[tuple[PreviewerRole, ...]] = tuple(
    PreviewerRole(grant.role, _SCOPE_LABELS[grant.scope], grant.why) for grant in PREVIEWER_GRANTS
)


def previewer_roles_table() -> str:
    """PREVIEWER_ROLES as the Markdown table docs/ci.md shows (a test keeps them equal)."""
    rows = [f"| `{role.role}` | {role.scope} | {role.reason} |" for role in PREVIEWER_ROLES]
    return "\n".join(["| Role | On | Why the previewer needs it |", "| --- | --- | --- |", *rows])


def deployer_roles_table() -> str:
    """DEPLOYER_ROLES as the Markdown table docs/deploy.md shows (a test keeps them equal)."""
    rows = [f"| `{role.role}` | {role.reason} |" for role in DEPLOYER_ROLES]
    return "\n".join(["| Role | Why the deploying identity needs it |", "| --- | --- |", *rows])


def grant_kind_roles_table() -> str:
    """GRANT_KIND_ROLES as the Markdown table docs/deploy.md shows (a test keeps them equal)."""
    rows = [f"| `{kind}` | `{role.role}` | {role.reason} |" for kind, role in GRANT_KIND_ROLES.items()]
    return "\n".join(["| `jobGrants` kind | Role | Why |", "| --- | --- | --- |", *rows])
