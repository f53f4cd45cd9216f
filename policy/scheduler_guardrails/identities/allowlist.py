"""The roles the stack may grant project-wide, and the rule that only they are.

project-iam-allowlist: a project-wide grant is a `gcp.projects.IAMMember` (never the
authoritative binding or policy, which would remove grants the stack does not own), to a
service account, for a role in PROJECT_ROLE_ALLOWLIST, with exactly the condition the list
gives it if any. The list is read from rules/config/grants.py, the one table of who holds which
role: each project-wide row (the stack's accounts' and the CI accounts') gives its role, its
reason and the kind of account that may hold it (`Holder`), which project-role-holders
(`holders`) checks. A feature that needs one more project role adds its row there.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from pulumi_policy import PolicyConfigSchema, ResourceValidationArgs

from ..engine.grants import PROJECT_MEMBER_PREFIX
from ..engine.pack_config import schema_problems
from ..engine.props import UNKNOWN, is_blank, lookup
from ..engine.types import PROJECT_IAM_BINDING, PROJECT_IAM_POLICY
from ..rules.config.grants import GRANTS, Account, Grant, Scope, grants_present
from ..rules.targets.registry import TARGET_KINDS


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
# The conditions a project-wide scope allows, each as a pattern the whole expression must match
# and as the docs show it. A scope not here is not checked for its condition.
_SCOPE_CONDITIONS: Final = {
    Scope.BUILD_SOURCES: (
        GCF_SOURCES_CONDITION,
        'resource.name == "projects/_/buckets/gcf-v2-sources-<number>-<region>" || '
        'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-<number>-<region>/")',
    ),
}
_PROXY_MODULES: Final = {kind.key: kind.handler_module for kind in TARGET_KINDS}


def _holder(grant: Grant) -> tuple[Holder, str | None]:
    """How the pack tells `grant`'s account from the stack's resources: a role the runtime
    account holds for a target kind's proxy, by the proxy module its function runs."""
    proxies = [when.kind for when in grant.when if when.kind is not None and not when.sample]
    if grant.account is Account.RUNTIME and proxies:
        if len(proxies) > 1:
            raise ValueError(
                f"policy/scheduler_guardrails/rules/config/grants.py: {grant.role}: one target kind per "
                "project-wide row"
            )
        return Holder.PROXY_RUNTIME, _PROXY_MODULES[proxies[0]]
    holders = {
        Account.RUNTIME: Holder.FUNCTION_RUNTIME,
        Account.TOKEN_CHECK: Holder.FUNCTION_RUNTIME,
        Account.BUILDER: Holder.FUNCTION_BUILD,
        Account.DEPLOYER: Holder.CI_DEPLOYER,
        Account.PREVIEWER: Holder.CI_PREVIEWER,
    }
    if grant.account not in holders:
        raise ValueError(
            f"policy/scheduler_guardrails/rules/config/grants.py: {grant.role} on {grant.scope.name} "
            f"for {grant.account.name}: the pack "
            "cannot tell that account from the stack's resources; add a Holder for it in "
            "policy/scheduler_guardrails/identities/allowlist.py"
        )
    return holders[grant.account], None


def _reason(grant: Grant) -> str:
    if grant.account is Account.DEPLOYER:
        return f"the CI deployer must {grant.why}"
    if grant.account is Account.PREVIEWER:
        return f"the CI previewer must {grant.why}"
    return f"{grant.account.shown}: {grant.why}"


def allowlist_of(grants: tuple[Grant, ...]) -> Mapping[str, AllowedProjectRole]:
    """The project-wide rows of `grants`, by role: the first row's reason and condition, every
    row's holder. A row of a target kind this checkout lacks allows nothing."""
    found: dict[str, AllowedProjectRole] = {}
    for grant in grants_present(_PROXY_MODULES.keys(), grants):
        if not grant.scope.project_wide:
            continue
        holder, proxy_module = _holder(grant)
        condition, shown = _SCOPE_CONDITIONS.get(grant.scope, (None, ""))
        allowed = found.setdefault(
            grant.role, AllowedProjectRole(_reason(grant), (), condition, shown, proxy_module)
        )
        if holder not in allowed.holders:
            found[grant.role] = dataclasses.replace(allowed, holders=(*allowed.holders, holder))
    return MappingProxyType(found)


# The one list of roles the stack may grant project-wide, each with the reason it cannot be
# scoped to a single resource and the kinds of account that may hold it.
PROJECT_ROLE_ALLOWLIST: Final[Mapping[str, AllowedProjectRole]] = allowlist_of(GRANTS)


# --- the list as policy config ---------------------------------------------------------------
# project-iam-allowlist and project-role-holders both take `allowedRoles`, an object of role ->
# {reason, holders, proxyModule?, condition?, conditionShown?}, whose declared `default` is
# PROJECT_ROLE_ALLOWLIST: the engine hands the default to a policy whose config leaves it out. A
# value given replaces the list whole, so an organisation writes every role it allows, and gives
# both policies the same value (each reads only its own config: a role the holders rule is not
# given is not checked for holders).

ALLOWED_ROLES: Final = "allowedRoles"
# How the config names each holder.
HOLDER_NAMES: Final = {
    Holder.FUNCTION_RUNTIME: "functionRuntime",
    Holder.PROXY_RUNTIME: "proxyRuntime",
    Holder.FUNCTION_BUILD: "functionBuild",
    Holder.CI_DEPLOYER: "ciDeployer",
    Holder.CI_PREVIEWER: "ciPreviewer",
}
_HOLDERS: Final = {name: holder for holder, name in HOLDER_NAMES.items()}
# A predefined role, or a custom role of a project or an organisation.
_ROLE: Final = r"^(roles/[A-Za-z]+(\.[A-Za-z]+)?|(projects|organizations)/[^/]+/roles/[A-Za-z0-9_.]+)$"


def to_config(allowed: AllowedProjectRole) -> dict[str, Any]:
    """One role's entry as the config spells it."""
    entry: dict[str, Any] = {
        "reason": allowed.reason,
        "holders": [HOLDER_NAMES[holder] for holder in allowed.holders],
    }
    if allowed.proxy_module is not None:
        entry["proxyModule"] = allowed.proxy_module
    if allowed.condition is not None:
        entry["condition"] = allowed.condition.pattern
        entry["conditionShown"] = allowed.condition_shown
    return entry


_ENTRY: Final = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "minLength": 1, "description": "Why the role cannot be narrower."},
        "holders": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "enum": list(HOLDER_NAMES.values())},
            "description": "The kinds of account that may hold it.",
        },
        "proxyModule": {
            "type": "string",
            "minLength": 1,
            "description": "With proxyRuntime: the proxy module whose functions' runtime accounts hold it.",
        },
        "condition": {
            "type": "string",
            "minLength": 1,
            "description": "A regular expression the grant's whole IAM condition expression must match.",
        },
        "conditionShown": {"type": "string", "description": "The condition as a violation shows it."},
    },
    "required": ["reason", "holders"],
    "additionalProperties": False,
}
ALLOWED_ROLES_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The roles a stack may grant project-wide, each with its reason and holders.",
    "patternProperties": {_ROLE: _ENTRY},
    "additionalProperties": False,
    "default": {role: to_config(allowed) for role, allowed in PROJECT_ROLE_ALLOWLIST.items()},
}
ALLOWLIST_CONFIG: Final = PolicyConfigSchema(properties={ALLOWED_ROLES: ALLOWED_ROLES_SCHEMA})


def configured_allowlist(config: Mapping[str, Any]) -> Mapping[str, AllowedProjectRole] | str:
    """The allow-list a policy's config gives (its default when it gives none), or what is
    wrong with it, naming the config key."""
    given = config.get(ALLOWED_ROLES)
    if given is None:
        return PROJECT_ROLE_ALLOWLIST
    return _parsed(json.dumps(given, sort_keys=True))


@functools.lru_cache(maxsize=8)
def _parsed(text: str) -> Mapping[str, AllowedProjectRole] | str:
    """Parsed once per distinct value: a resource policy reads its config for every resource."""
    given = json.loads(text)
    problems = schema_problems(given, ALLOWED_ROLES_SCHEMA, ALLOWED_ROLES)
    found: dict[str, AllowedProjectRole] = {}
    for role, entry in given.items() if not problems else ():
        holders = tuple(_HOLDERS[name] for name in entry["holders"])
        proxy_module = entry.get("proxyModule")
        if (Holder.PROXY_RUNTIME in holders) != (proxy_module is not None):
            problems.append(f"{ALLOWED_ROLES}.{role}: set proxyModule exactly when holders has proxyRuntime")
        condition = None
        if "condition" in entry:
            try:
                condition = re.compile(entry["condition"])
            except re.error as error:
                problems.append(f"{ALLOWED_ROLES}.{role}.condition: not a regular expression ({error})")
        shown = entry.get("conditionShown", entry.get("condition", ""))
        found[role] = AllowedProjectRole(entry["reason"], holders, condition, shown, proxy_module)
    if problems:
        return "the policy's config is refused: " + "; ".join(problems)
    return found


def check_project_iam_allowlist(args: ResourceValidationArgs) -> Iterable[str]:
    allowlist = configured_allowlist(args.get_config())
    if isinstance(allowlist, str):
        yield f"{args.resource_type} '{args.name}' cannot be judged: {allowlist}"
        return
    allowed = ", ".join(sorted(allowlist))
    if args.resource_type in (PROJECT_IAM_BINDING, PROJECT_IAM_POLICY):
        yield (
            f"{args.resource_type} '{args.name}' is authoritative for the whole project and would remove "
            "grants this stack does not own. Use gcp.projects.IAMMember, and only for the allow-listed "
            f"roles ({allowed}), or grant on the resource itself."
        )
        return
    role = lookup(args.props, "role")
    member = lookup(args.props, "member")
    if isinstance(role, str) and role not in allowlist:
        yield (
            f"Project IAM member '{args.name}': role {role} is granted project-wide, but only {allowed} may "
            "be. Grant it on the specific resource (service, bucket, ...) instead, or add the grant with "
            "its reason to policy/scheduler_guardrails/rules/config/grants.py, which PROJECT_ROLE_ALLOWLIST "
            "is read from (an "
            f"organisation may allow it in the policy's {ALLOWED_ROLES} config instead)."
        )
    if isinstance(member, str) and not member.startswith(PROJECT_MEMBER_PREFIX):
        yield (
            f"Project IAM member '{args.name}': member '{member}' is not a service account; project-wide "
            f"grants are for the stack's own accounts only. Use a '{PROJECT_MEMBER_PREFIX}<email>' member."
        )
    allowed_role = allowlist.get(role) if isinstance(role, str) else None
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
