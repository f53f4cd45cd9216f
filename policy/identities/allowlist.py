"""The one list of roles the stack may grant project-wide, and the rule that only they are.

project-iam-allowlist: a project-wide grant is a `gcp.projects.IAMMember` (never the
authoritative binding or policy, which would remove grants the stack does not own), to a
service account, for a role in PROJECT_ROLE_ALLOWLIST, with exactly the condition the list
gives it if any. Each entry says why the role cannot be scoped to one resource and which of
the stack's accounts may hold it (`Holder`); project-role-holders (`holders`) checks that.
Extend the list here, and only here, when a feature needs one more project role.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from pulumi_policy import ResourceValidationArgs

from infra.config.deployer_roles import DEPLOYER_ROLES, GRANT_KIND_ROLES, PREVIEWER_ROLES, PROJECT_SCOPE
from infra.targets.registry import TARGET_KINDS
from policy.engine.grants import PROJECT_MEMBER_PREFIX
from policy.engine.props import UNKNOWN, is_blank, lookup
from policy.engine.types import PROJECT_IAM_BINDING, PROJECT_IAM_POLICY


class Holder(enum.Enum):
    """Which of the stack's own accounts may hold an allow-listed project role."""

    # serviceConfig.serviceAccountEmail of any Cloud Functions v2 function of the stack.
    FUNCTION_RUNTIME = "the runtime account of a function in this stack"
    # The same, but only of a function that runs a target kind's proxy module (the allowed
    # role's `proxy_module`) through JOB_HANDLER or a handler in its job table.
    PROXY_RUNTIME = "the runtime account of a function whose JOB_HANDLER or job table handlers use {module}"
    # buildConfig.serviceAccount of any Cloud Functions v2 function of the stack.
    FUNCTION_BUILD = "the build account (buildConfig.serviceAccount) of a function in this stack"
    # serviceAccountId of roles/iam.workloadIdentityUser grants whose every member is one
    # deployment environment's subject: the CI deployer bootstrap/ creates.
    CI_DEPLOYER = (
        "the CI deployer: an account of this stack that only GitHub deployment-environment jobs may "
        "impersonate (roles/iam.workloadIdentityUser for principal://.../subject/repo:<owner>/<repo>"
        ":environment:<name> only)"
    )
    # The same, for pull request jobs' subject: the read-only CI previewer bootstrap/ creates.
    CI_PREVIEWER = (
        "the CI previewer: an account of this stack that only GitHub pull request jobs may impersonate "
        "(roles/iam.workloadIdentityUser for principal://.../subject/repo:<owner>/<repo>:pull_request only)"
    )


@dataclass(frozen=True)
class AllowedProjectRole:
    """A role the stack may grant project-wide: why it cannot be scoped, and to whom.

    `condition`, when set, is the only IAM condition expression the grant may carry (a full
    match): the role is allowed only as narrowed by it, never unconditioned or broader.
    """

    reason: str
    holders: tuple[Holder, ...]
    condition: re.Pattern[str] | None = None
    condition_shown: str = ""
    # For Holder.PROXY_RUNTIME: the proxy module whose functions' runtime accounts hold it.
    proxy_module: str | None = None

    def holders_shown(self) -> str:
        return " or ".join(holder.value.format(module=self.proxy_module) for holder in self.holders)


# What infra/resources/build.py grants the build account: object read on the one bucket Cloud Functions
# copies sources to (`gcf-v2-sources-<project number>-<region>`) or objects in it; both halves
# must name the same bucket.
GCF_SOURCES_CONDITION: Final = re.compile(
    r'^resource\.name == "projects/_/buckets/(?P<bucket>gcf-v2-sources-\d+-[a-z]+-[a-z]+\d+)" \|\| '
    r'resource\.name\.startsWith\("projects/_/buckets/(?P=bucket)/"\)$'
)


_PREVIEWER_PROJECT_ROLES: Final = frozenset(r.role for r in PREVIEWER_ROLES if r.scope == PROJECT_SCOPE)


def _ci_holders(role: str) -> tuple[Holder, ...]:
    """The deployer holds every deploy role; the previewer also holds the read-only ones."""
    if role in _PREVIEWER_PROJECT_ROLES:
        return (Holder.CI_DEPLOYER, Holder.CI_PREVIEWER)
    return (Holder.CI_DEPLOYER,)


# The one list of roles the stack may grant project-wide, each with the reason it cannot be
# scoped to a single resource and the one kind of account that may hold it. Extend it here
# (and only here) when a feature needs one more.
PROJECT_ROLE_ALLOWLIST: Final[Mapping[str, AllowedProjectRole]] = MappingProxyType(
    {
        "roles/datastore.user": AllowedProjectRole(
            "the runtime account claims and finishes run records; Firestore has no per-database "
            "IAM resource, so the grant is project-wide with a condition naming the database",
            (Holder.FUNCTION_RUNTIME,),
        ),
        # What a target kind cannot do without (infra/targets/): held by the runtime account
        # of a function that runs the kind's proxy.
        **{
            role.role: AllowedProjectRole(
                role.reason, (Holder.PROXY_RUNTIME,), proxy_module=kind.handler_module
            )
            for kind in TARGET_KINDS
            for role in kind.project_roles
        },
        "roles/logging.logWriter": AllowedProjectRole(
            "the build account writes the functions' build logs; Cloud Logging has no narrower IAM "
            "resource for writing log entries than the project",
            (Holder.FUNCTION_BUILD,),
        ),
        "roles/storage.objectViewer": AllowedProjectRole(
            "the build account fetches the source Cloud Functions copied to gcf-v2-sources-<project "
            "number>-<region>, a bucket that does not exist before the first deploy, so the grant "
            "sits on the project with a condition naming that bucket",
            (Holder.FUNCTION_BUILD,),
            condition=GCF_SOURCES_CONDITION,
            condition_shown=(
                'resource.name == "projects/_/buckets/gcf-v2-sources-<number>-<region>" || '
                'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-<number>-<region>/")'
            ),
        ),
        # Deploying the stack is project-wide by nature; each role's reason is in
        # infra/config/deployer_roles.py, the list the deploy docs and bootstrap/ use.
        # With the bootstrap's `jobGrants`, also the role that sets those resources' IAM policies.
        **{
            deployer_role.role: AllowedProjectRole(
                f"the CI deployer must {deployer_role.reason}", _ci_holders(deployer_role.role)
            )
            for deployer_role in (*DEPLOYER_ROLES, *GRANT_KIND_ROLES.values())
        },
    }
)


def check_project_iam_allowlist(args: ResourceValidationArgs) -> Iterable[str]:
    allowed = ", ".join(sorted(PROJECT_ROLE_ALLOWLIST))
    if args.resource_type in (PROJECT_IAM_BINDING, PROJECT_IAM_POLICY):
        yield (
            f"{args.resource_type} '{args.name}' is authoritative for the whole project and would remove "
            "grants this stack does not own. Use gcp.projects.IAMMember, and only for the allow-listed "
            f"roles ({allowed}), or grant on the resource itself."
        )
        return
    role = lookup(args.props, "role")
    member = lookup(args.props, "member")
    if isinstance(role, str) and role not in PROJECT_ROLE_ALLOWLIST:
        yield (
            f"Project IAM member '{args.name}': role {role} is granted project-wide, but only {allowed} may "
            "be. Grant it on the specific resource (service, bucket, ...) instead, or add the role with "
            "its reason to PROJECT_ROLE_ALLOWLIST in policy/identities/allowlist.py."
        )
    if isinstance(member, str) and not member.startswith(PROJECT_MEMBER_PREFIX):
        yield (
            f"Project IAM member '{args.name}': member '{member}' is not a service account; project-wide "
            f"grants are for the stack's own accounts only. Use a '{PROJECT_MEMBER_PREFIX}<email>' member."
        )
    allowed_role = PROJECT_ROLE_ALLOWLIST.get(role) if isinstance(role, str) else None
    if allowed_role is not None and allowed_role.condition is not None:
        expression = lookup(args.props, "condition", "expression")
        if expression is UNKNOWN:
            return
        if not (isinstance(expression, str) and allowed_role.condition.match(expression.strip())):
            shown = "has no condition" if is_blank(expression) else f"has condition '{expression}'"
            yield (
                f"Project IAM member '{args.name}': {role} {shown}, but it may be granted project-wide only "
                f"with exactly the condition {allowed_role.condition_shown} ({allowed_role.reason})."
            )
