"""The allow-list as policy config: a config file as `pulumi policy validate-config` and `pulumi
policy enable --config` take it tunes project-iam-allowlist and project-role-holders, and one
the engine would refuse is refused, each problem naming its key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from ...scheduler_guardrails.engine.pack_config import KEYWORDS, reconcile, schema_problems
from ...scheduler_guardrails.identities.allowlist import (
    ALLOWED_ROLES,
    ALLOWED_ROLES_SCHEMA,
    ALLOWLIST_CONFIG,
    PROJECT_ROLE_ALLOWLIST,
    configured_allowlist,
)
from ...scheduler_guardrails.offline import (
    pack_violations,
    resource_policy,
    run_resource_policy,
    run_stack_policy,
    stack_policy,
    stack_resource,
)
from ...scheduler_guardrails.policies import FUNCTION_V2, POLICIES, PROJECT_IAM_MEMBER
from .. import fixtures

ALLOWLIST, HOLDERS = "project-iam-allowlist", "project-role-holders"
# A role no row of rules/config/grants.py grants project-wide.
EXTRA_ROLE = "roles/cloudtrace.agent"
EXTRA_GRANT = {"project": "my-project", "role": EXTRA_ROLE, "member": f"serviceAccount:{fixtures.RUNTIME_SA}"}


def default_roles() -> dict[str, Any]:
    """The declared default, as a config file's JSON would hold it."""
    roles: dict[str, Any] = json.loads(json.dumps(ALLOWED_ROLES_SCHEMA["default"]))
    return roles


def config_file(tmp_path: Path, roles: dict[str, Any], level: str = "mandatory") -> dict[str, Any]:
    """A config file that gives both allow-list policies `roles`, written and read back as the
    CLI reads it."""
    path = tmp_path / "policy-config.json"
    entry = {"enforcementLevel": level, ALLOWED_ROLES: roles}
    path.write_text(json.dumps({ALLOWLIST: entry, HOLDERS: entry}), encoding="utf-8")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def allowlist_messages(props: dict[str, Any], file: dict[str, Any] | None = None) -> list[str]:
    """project-iam-allowlist on one project grant, configured as `file` makes it."""
    configs, problems = reconcile(file or {}, POLICIES)
    assert problems == []
    return run_resource_policy(
        resource_policy(ALLOWLIST), PROJECT_IAM_MEMBER, props, "grant", configs[ALLOWLIST].properties
    )


def test_both_policies_declare_the_list_with_the_pack_s_own_as_default() -> None:
    for name in (ALLOWLIST, HOLDERS):
        assert next(p for p in POLICIES if p.name == name).config_schema is ALLOWLIST_CONFIG
    assert schema_problems(ALLOWED_ROLES_SCHEMA["default"], ALLOWED_ROLES_SCHEMA, ALLOWED_ROLES) == []
    # Read back from the config's JSON, the default is the list itself.
    assert configured_allowlist({ALLOWED_ROLES: default_roles()}) == PROJECT_ROLE_ALLOWLIST
    assert configured_allowlist({}) is PROJECT_ROLE_ALLOWLIST


def test_a_role_the_config_allows_passes_and_the_default_refuses_it(tmp_path: Path) -> None:
    [refused] = allowlist_messages(EXTRA_GRANT)
    assert f"role {EXTRA_ROLE} is granted project-wide" in refused and ALLOWED_ROLES in refused
    roles = default_roles() | {EXTRA_ROLE: {"reason": "traces", "holders": ["functionRuntime"]}}
    file = config_file(tmp_path, roles)
    assert allowlist_messages(EXTRA_GRANT, file) == []
    # The holders rule reads the same list: the role is the runtime account's, nobody else's.
    configs, _ = reconcile(file, POLICIES)
    other = EXTRA_GRANT | {"member": "serviceAccount:someone@my-project.iam.gserviceaccount.com"}
    function = fixtures.function()
    assert _holders(function, EXTRA_GRANT, configs[HOLDERS].properties) == []
    [message] = _holders(function, other, configs[HOLDERS].properties)
    assert f"{EXTRA_ROLE} is granted project-wide to" in message


def _holders(function: dict[str, Any], grant: dict[str, Any], config: Any) -> list[str]:
    resources = [stack_resource(FUNCTION_V2, "fn", function), stack_resource(PROJECT_IAM_MEMBER, "g", grant)]
    return run_stack_policy(stack_policy(HOLDERS), resources, config).messages


def test_a_config_can_take_a_role_away(tmp_path: Path) -> None:
    roles = {role: entry for role, entry in default_roles().items() if role != "roles/logging.logWriter"}
    grant = {"role": "roles/logging.logWriter", "member": f"serviceAccount:{fixtures.BUILDER_SA}"}
    assert allowlist_messages(grant) == []
    [message] = allowlist_messages(grant, config_file(tmp_path, roles))
    assert "role roles/logging.logWriter is granted project-wide" in message


@pytest.mark.parametrize(
    ("file", "problem"),
    [
        ({ALLOWLIST: {"enforcementLevel": "strict"}}, "'strict' is not a valid enforcement level"),
        ({ALLOWLIST: 3}, "must be a string or object"),
        (
            {ALLOWLIST: {ALLOWED_ROLES: ["roles/datastore.user"]}},
            f"{ALLOWLIST}.{ALLOWED_ROLES}: expected object",
        ),
        (
            {ALLOWLIST: {ALLOWED_ROLES: {"datastore.user": {"reason": "r", "holders": ["functionRuntime"]}}}},
            f"{ALLOWLIST}.{ALLOWED_ROLES}.datastore.user: not allowed here",
        ),
        (
            {HOLDERS: {ALLOWED_ROLES: {EXTRA_ROLE: {"reason": "r", "holders": ["everyone"]}}}},
            f"{HOLDERS}.{ALLOWED_ROLES}.{EXTRA_ROLE}.holders[0]: 'everyone' is not one of",
        ),
        (
            {HOLDERS: {ALLOWED_ROLES: {EXTRA_ROLE: {"holders": ["functionBuild"]}}}},
            f"{HOLDERS}.{ALLOWED_ROLES}.{EXTRA_ROLE}: reason is required",
        ),
        (
            {HOLDERS: {ALLOWED_ROLES: {EXTRA_ROLE: {"reason": "r", "holders": [], "scope": "x"}}}},
            f"{HOLDERS}.{ALLOWED_ROLES}.{EXTRA_ROLE}.holders: at least 1 items",
        ),
    ],
)
def test_a_malformed_config_is_refused_naming_the_key(file: dict[str, Any], problem: str) -> None:
    _, problems = reconcile(file, POLICIES)
    assert any(problem in found for found in problems), problems
    with pytest.raises(ValueError, match="the policy config is refused"):
        pack_violations([], file)


def test_a_config_the_schema_cannot_refuse_is_reported_by_the_policy_naming_the_key() -> None:
    """A proxy holder without its module, a condition that is no regular expression: each
    policy says its config is refused rather than judging with half a list, or failing."""
    roles = {
        EXTRA_ROLE: {"reason": "r", "holders": ["proxyRuntime"]},
        "roles/storage.objectViewer": {"reason": "r", "holders": ["functionBuild"], "condition": "("},
    }
    config = {ALLOWED_ROLES: roles}
    [message] = run_resource_policy(resource_policy(ALLOWLIST), PROJECT_IAM_MEMBER, EXTRA_GRANT, "g", config)
    assert f"{ALLOWED_ROLES}.{EXTRA_ROLE}: set proxyModule exactly when holders has proxyRuntime" in message
    assert f"{ALLOWED_ROLES}.roles/storage.objectViewer.condition: not a regular expression" in message
    assert message.startswith(f"{PROJECT_IAM_MEMBER} 'g' cannot be judged: the policy's config is refused")
    [stack_message] = _holders(fixtures.function(), EXTRA_GRANT, config)
    assert stack_message.startswith(
        "project-role-holders cannot judge the stack: the policy's config is refused"
    )


def test_enforcement_levels_stay_configurable() -> None:
    """The config file sets a policy's level as CrossGuard does: advisory reports without
    failing, disabled does not run; `all` sets every policy's."""
    grant = ("gcp:projects/iAMMember:IAMMember", "g", EXTRA_GRANT, EXTRA_GRANT)
    [mandatory] = [v for v in pack_violations([grant]) if v.policy == ALLOWLIST]
    assert not mandatory.advisory
    [advisory] = [v for v in pack_violations([grant], {ALLOWLIST: "advisory"}) if v.policy == ALLOWLIST]
    assert advisory.advisory
    assert [v for v in pack_violations([grant], {ALLOWLIST: "disabled"}) if v.policy == ALLOWLIST] == []
    configs, _ = reconcile({"all": "advisory", HOLDERS: "mandatory"}, POLICIES)
    assert configs[ALLOWLIST].level == EnforcementLevel.ADVISORY
    assert configs[HOLDERS].level == EnforcementLevel.MANDATORY


def test_the_checker_refuses_a_schema_keyword_it_does_not_implement() -> None:
    """So the schema can never lean on a keyword the check would silently pass."""
    assert "format" not in KEYWORDS
    with pytest.raises(ValueError, match="does not implement"):
        schema_problems("x", {"type": "string", "format": "email"}, "key")
    assert schema_problems("x", {"type": "string", "enum": ["y"]}, "key") == ["key: 'x' is not one of y"]
