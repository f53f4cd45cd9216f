"""Roles: no primitive roles, conditioned Firestore grants, and the one list of roles the stack
may grant project-wide, each held only by the accounts it is listed for."""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from pulumi_policy import (
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
)

from bootstrap.deployer_roles import DEPLOYER_ROLES, PREVIEWER_ROLES, PROJECT_SCOPE
from policy.ci_rules import ci_deployer_accounts, ci_previewer_accounts
from policy.props import (
    BIGQUERY_PROXY_MODULE,
    CONDITIONAL_ROLES,
    FUNCTION_V2,
    PRIMITIVE_ROLES,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_IAM_POLICY,
    PROJECT_MEMBER_PREFIX,
    UNKNOWN,
    WORKFLOWS_PROXY_MODULE,
    Absent,
    account_email,
    function_env,
    iam_grants,
    is_blank,
    is_iam_type,
    lookup,
    resources_of,
)


class Holder(enum.Enum):
    """Which of the stack's own accounts may hold an allow-listed project role."""

    # serviceConfig.serviceAccountEmail of any Cloud Functions v2 function of the stack.
    FUNCTION_RUNTIME = "the runtime account of a function in this stack"
    # The same, but only of a function that runs the Workflows proxy (jobs.workflows) through
    # JOB_HANDLER or JOB_HANDLERS.
    WORKFLOWS_PROXY_RUNTIME = "the runtime account of a function whose JOB_HANDLER(S) use jobs.workflows"
    # The same, for the BigQuery proxy (jobs.bigquery_job).
    BIGQUERY_PROXY_RUNTIME = "the runtime account of a function whose JOB_HANDLER(S) use jobs.bigquery_job"
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
        "roles/workflows.invoker": AllowedProjectRole(
            "the runtime account starts executions when a job goes through the Workflows proxy; "
            "Workflows has no per-workflow IAM resource",
            (Holder.WORKFLOWS_PROXY_RUNTIME,),
        ),
        "roles/bigquery.jobUser": AllowedProjectRole(
            "the runtime account creates query jobs when a job goes through the BigQuery proxy; job "
            "creation (bigquery.jobs.create) has no narrower IAM resource than the project, and the "
            "data the jobs touch is granted per dataset",
            (Holder.BIGQUERY_PROXY_RUNTIME,),
        ),
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
        # bootstrap/deployer_roles.py, the list the deploy docs and bootstrap/ use.
        **{
            deployer_role.role: AllowedProjectRole(
                f"the CI deployer must {deployer_role.reason}", _ci_holders(deployer_role.role)
            )
            for deployer_role in DEPLOYER_ROLES
        },
    }
)


# --- roles ----------------------------------------------------------------------------------


def check_no_primitive_roles(args: ResourceValidationArgs) -> Iterable[str]:
    if not is_iam_type(args.resource_type):
        return
    for grant in iam_grants(args.props):
        if isinstance(grant.role, str) and grant.role in PRIMITIVE_ROLES:
            yield (
                f"{args.resource_type} '{args.name}': role {grant.role} ({grant.where}) is a primitive role "
                "that covers nearly every service in the project. Grant the narrowest predefined role "
                "instead (roles/run.invoker, roles/datastore.user with a condition, ...)."
            )


def check_conditional_roles(args: ResourceValidationArgs) -> Iterable[str]:
    if not is_iam_type(args.resource_type):
        return
    for grant in iam_grants(args.props):
        if not (isinstance(grant.role, str) and grant.role in CONDITIONAL_ROLES):
            continue
        if grant.condition is UNKNOWN:
            continue
        expression = lookup(grant.condition, "expression")
        if expression is UNKNOWN:
            continue
        if is_blank(expression):
            yield (
                f"{args.resource_type} '{args.name}': {grant.role} ({grant.where}) has no condition, so it "
                "reaches every Firestore database in the project. Add condition {title, expression} "
                "limiting it to this database, e.g. "
                "resource.name.startsWith('projects/<project>/databases/<database>')."
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
            "its reason to PROJECT_ROLE_ALLOWLIST in policy/iam_rules.py."
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


# --- stack: who holds the project-wide roles ------------------------------------------------


def _handler_specs(function: PolicyResource) -> list[str] | Absent:
    """Every module:callable a function may run (JOB_HANDLER and JOB_HANDLERS' values)."""
    specs: list[str] = []
    single = function_env(function, "JOB_HANDLER")
    table = function_env(function, "JOB_HANDLERS")
    if single is UNKNOWN or table is UNKNOWN:
        return Absent.UNKNOWN
    if isinstance(single, str):
        specs.append(single)
    if isinstance(table, str):
        try:
            parsed = json.loads(table)
        except json.JSONDecodeError:
            parsed = {}
        if isinstance(parsed, dict):
            specs.extend(v for v in parsed.values() if isinstance(v, str))
    return specs


# Holders that are the runtime account of a function running one proxy module.
_PROXY_MODULES: Final = {
    Holder.WORKFLOWS_PROXY_RUNTIME: WORKFLOWS_PROXY_MODULE,
    Holder.BIGQUERY_PROXY_RUNTIME: BIGQUERY_PROXY_MODULE,
}


def _uses_module(function: PolicyResource, module: str) -> bool | Absent:
    specs = _handler_specs(function)
    if isinstance(specs, Absent):
        return specs
    return any(spec.split(":")[0].strip() == module for spec in specs)


def _holder_accounts(holder: Holder, resources: list[PolicyResource]) -> set[str] | Absent:
    """Emails (lower-case) of the stack's accounts that may hold a role, or UNKNOWN when some
    account or handler is not known in preview (then nothing is reported)."""
    if holder is Holder.CI_DEPLOYER:
        return ci_deployer_accounts(resources)
    if holder is Holder.CI_PREVIEWER:
        return ci_previewer_accounts(resources)
    emails: set[str] = set()
    for function in resources_of(resources, FUNCTION_V2):
        if holder is Holder.FUNCTION_BUILD:
            build_account = lookup(function.props, "buildConfig", "serviceAccount")
            if build_account is UNKNOWN:
                return Absent.UNKNOWN
            if isinstance(build_account, str) and build_account.strip():
                emails.add(account_email(build_account))
            continue
        if holder in _PROXY_MODULES:
            uses = _uses_module(function, _PROXY_MODULES[holder])
            if uses is UNKNOWN:
                return UNKNOWN
            if uses is not True:
                continue
        account = lookup(function.props, "serviceConfig", "serviceAccountEmail")
        if account is UNKNOWN:
            return Absent.UNKNOWN
        if isinstance(account, str) and account.strip():
            emails.add(account.strip().lower())
    return emails


def runtime_accounts(resources: list[PolicyResource]) -> set[str] | Absent:
    """Emails (lower-case) of every function's runtime account in the stack, or UNKNOWN."""
    return _holder_accounts(Holder.FUNCTION_RUNTIME, resources)


def _accounts_of(holders: tuple[Holder, ...], resources: list[PolicyResource]) -> set[str] | Absent:
    found: set[str] = set()
    for holder in holders:
        accounts = _holder_accounts(holder, resources)
        if isinstance(accounts, Absent):
            return accounts
        found |= accounts
    return found


def validate_project_role_holders(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    resources = list(args.resources)
    for grant in resources_of(resources, PROJECT_IAM_MEMBER):
        role, member = lookup(grant.props, "role"), lookup(grant.props, "member")
        allowed = PROJECT_ROLE_ALLOWLIST.get(role) if isinstance(role, str) else None
        if allowed is None or not isinstance(member, str) or not member.startswith(PROJECT_MEMBER_PREFIX):
            continue  # unknown, or reported by project-iam-allowlist
        holders = _accounts_of(allowed.holders, resources)
        if isinstance(holders, Absent):
            continue
        email = member.removeprefix(PROJECT_MEMBER_PREFIX).strip().lower()
        if email in holders:
            continue
        found = ", ".join(sorted(holders)) if holders else "none in this stack"
        who = " or ".join(holder.value for holder in allowed.holders)
        report_violation(
            f"Project IAM member '{grant.name}': {role} is granted project-wide to '{member}', but only "
            f"{who} may hold it (found: {found}). Remove the grant, or grant it to that account only; a "
            "job that no longer uses the feature needs no grant at all.",
            grant.urn,
        )
