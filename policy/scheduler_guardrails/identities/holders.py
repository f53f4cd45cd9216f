"""project-role-holders: each allow-listed project role is held only by the account it is
listed for.

A holder (allowlist.py's `Holder`) is told from the stack itself: a function's runtime or
build account, the runtime account of a function whose handlers use a proxy module, or a CI
account told by who may impersonate it (ci.py). When an account or a handler is not known yet
(preview), nothing is reported: an account that may be the right one is never refused.
"""

from __future__ import annotations

from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs

from exactly_once.config import JOB_HANDLER_ENV, JobTable

from ..engine.env import function_env
from ..engine.grants import PROJECT_MEMBER_PREFIX, account_email
from ..engine.job_table import job_table_of
from ..engine.props import UNKNOWN, Absent, lookup
from ..engine.types import FUNCTION_V2, PROJECT_IAM_MEMBER, resources_of
from .allowlist import AllowedProjectRole, Holder, configured_allowlist
from .ci import ci_deployer_accounts, ci_previewer_accounts


def _handler_specs(function: PolicyResource, resources: list[PolicyResource]) -> list[str] | Absent:
    """Every module:callable a function may run (JOB_HANDLER and its job table's handlers; a
    malformed table runs nothing: the function refuses to start)."""
    specs: list[str] = []
    single = function_env(function, JOB_HANDLER_ENV)
    table = job_table_of(function, resources)
    if single is UNKNOWN or table is UNKNOWN:
        return Absent.UNKNOWN
    if isinstance(single, str):
        specs.append(single)
    if isinstance(table, JobTable):
        specs.extend(policy.handler for policy in table.jobs.values() if policy.handler is not None)
    return specs


def _uses_module(function: PolicyResource, module: str, resources: list[PolicyResource]) -> bool | Absent:
    specs = _handler_specs(function, resources)
    if isinstance(specs, Absent):
        return specs
    return any(spec.split(":")[0].strip() == module for spec in specs)


def _holder_accounts(
    holder: Holder, resources: list[PolicyResource], proxy_module: str | None = None
) -> set[str] | Absent:
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
        if holder is Holder.PROXY_RUNTIME:
            uses = _uses_module(function, str(proxy_module), resources)
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


def _accounts_of(allowed: AllowedProjectRole, resources: list[PolicyResource]) -> set[str] | Absent:
    found: set[str] = set()
    for holder in allowed.holders:
        accounts = _holder_accounts(holder, resources, allowed.proxy_module)
        if isinstance(accounts, Absent):
            return accounts
        found |= accounts
    return found


def validate_project_role_holders(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    resources = list(args.resources)
    allowlist = configured_allowlist(args.get_config())
    if isinstance(allowlist, str):
        report_violation(f"project-role-holders cannot judge the stack: {allowlist}", None)
        return
    for grant in resources_of(resources, PROJECT_IAM_MEMBER):
        role, member = lookup(grant.props, "role"), lookup(grant.props, "member")
        allowed = allowlist.get(role) if isinstance(role, str) else None
        if allowed is None or not isinstance(member, str) or not member.startswith(PROJECT_MEMBER_PREFIX):
            continue  # unknown, or reported by project-iam-allowlist
        holders = _accounts_of(allowed, resources)
        if isinstance(holders, Absent):
            continue
        email = member.removeprefix(PROJECT_MEMBER_PREFIX).strip().lower()
        if email in holders:
            continue
        found = ", ".join(sorted(holders)) if holders else "none in this stack"
        who = allowed.holders_shown()
        report_violation(
            f"Project IAM member '{grant.name}': {role} is granted project-wide to '{member}', but only "
            f"{who} may hold it (found: {found}). Remove the grant, or grant it to that account only; a "
            "job that no longer uses the feature needs no grant at all.",
            grant.urn,
        )
