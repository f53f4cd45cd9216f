"""policy/scheduler_guardrails/rules/config/grants.py is the whole truth about the stack's IAM, under
Pulumi's mocks: every
IAM member, binding or policy resource the program declares is a row of the table (its account,
its role, its kind of scope), and every row that applies is declared.

Two stacks: the suite's stack with every option and every target kind this checkout has
(tests/infra/conftest.py's every_option_values: a job's `grants` for every role the table lets
a job ask for among them), where every row applies; and the plainest stack, where only the
rows made `ALWAYS` do. A grant added in code without its row, a
row whose grant the program no longer makes, or a grant made without its condition fails one
of them.
"""

from __future__ import annotations

import re

import pytest

from infra.config.schema import REPO_ROOT
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.engine.types import is_iam_type
from policy.scheduler_guardrails.rules.config.grants import (
    ALWAYS,
    STACK_GRANTS,
    Account,
    Scope,
    grants_present,
)
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KEYS, TARGET_KINDS
from tests.infra.conftest import PROJECT, build, every_option_values, valid_values
from tests.support.sources import python_sources, string_constants
from tools.mocked_program import MockedResource, MockedStack, mock_stack

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
TOKEN_CHECK_ENTRY_POINT = "check_idempotency_token"


@pytest.fixture(scope="module")
def everything(every_option_stack: MockedStack) -> tuple[StackSettings, MockedStack]:
    return build(every_option_values()), every_option_stack


@pytest.fixture(scope="module")
def plainest() -> tuple[StackSettings, MockedStack]:
    settings = build(valid_values())
    return settings, mock_stack(settings)


def member_of(settings: StackSettings, account: Account) -> str:
    """The IAM member of one of the stack's accounts, as the mocks answer its email."""
    return (
        f"serviceAccount:{settings.names.service_account_id(account.key)}@{PROJECT}.iam.gserviceaccount.com"
    )


# (account, role, scope) by name, as a failure shows them.
Made = tuple[str, str, str]


def made(settings: StackSettings, stack: MockedStack) -> dict[Made, list[str]]:
    """Every grant the program declares, as (account, role, scope), with the names of the
    resources that make it. A grant to no account of the stack, or with no member, fails."""
    accounts = {member_of(settings, account): account for account in Account if account.of_the_stack}
    found: dict[Made, list[str]] = {}
    for resource in stack.resources:
        if not is_iam_type(resource.type):
            continue
        member = resource.inputs.get("member")
        assert member in accounts, (
            f"{resource.type} {resource.name}: member {member!r} of no account of the stack"
        )
        key = (accounts[member].name, resource.inputs["role"], _scope(resource, stack).name)
        found.setdefault(key, []).append(resource.name)
    return found


def _scope(resource: MockedResource, stack: MockedStack) -> Scope:
    """The scope a grant is on: its resource's type, and where several scopes share a type,
    what it names (the condition of a project grant, the service of a Cloud Run grant)."""
    scopes = {grant.scope for grant in STACK_GRANTS if grant.scope.resource_type == resource.type}
    assert scopes, f"{resource.type} {resource.name}: a kind of grant no row of the table has"
    if Scope.PROJECT in scopes:
        expression = str(resource.inputs.get("condition", {}).get("expression", ""))
        if "/databases/" in expression:
            return Scope.LEDGER_DATABASE
        if "gcf-v2-sources-" in expression:
            return Scope.BUILD_SOURCES
        assert not expression, f"{resource.name}: a condition no scope of the table has: {expression}"
        return Scope.PROJECT
    if Scope.FUNCTION_SERVICE in scopes:
        functions = {
            f.outputs["serviceConfig"]["service"]: f.inputs["buildConfig"]["entryPoint"]
            for f in stack.of_type(FUNCTION)
        }
        entry_point = functions.get(resource.inputs["name"])
        if entry_point is None:
            return Scope.CLOUD_RUN_SERVICE
        return Scope.TOKEN_CHECK_SERVICE if entry_point == TOKEN_CHECK_ENTRY_POINT else Scope.FUNCTION_SERVICE
    [scope] = scopes
    return scope


def rows(*, always_only: bool = False) -> set[Made]:
    present = grants_present(TARGET_KEYS, STACK_GRANTS)
    return {(g.account.name, g.role, g.scope.name) for g in present if not always_only or ALWAYS in g.when}


def test_every_grant_of_a_stack_with_everything_on_is_a_row_and_every_row_is_made(
    everything: tuple[StackSettings, MockedStack],
) -> None:
    found = made(*everything)
    assert set(found) - rows() == set(), (
        "grants the program makes that policy/scheduler_guardrails/rules/config/grants.py lacks"
    )
    assert rows() - set(found) == set(), (
        "rows of policy/scheduler_guardrails/rules/config/grants.py the program no longer makes"
    )


def test_the_plainest_stack_makes_only_the_rows_made_always(
    plainest: tuple[StackSettings, MockedStack],
) -> None:
    assert set(made(*plainest)) == rows(always_only=True)


def test_each_grant_is_made_as_often_as_its_scope_says(everything: tuple[StackSettings, MockedStack]) -> None:
    """Once per region where the scope says so (the checks above see a triple once however
    often it is made), once per resource on "one" resource, once otherwise."""
    settings, stack = everything
    for (_, role, scope_name), names in made(settings, stack).items():
        scope = Scope[scope_name]
        if scope.shown.startswith("one "):
            continue
        expected = len(settings.regions) if "per region" in scope.shown else 1
        assert len(names) == expected, (role, scope, names)


def test_the_check_sees_a_grant_the_table_lacks(everything: tuple[StackSettings, MockedStack]) -> None:
    """Guards the tests above against passing because they compare nothing: one more member
    in the program, a role the table does not list, is found."""
    settings, stack = everything
    extra = MockedResource(
        "gcp:projects/iAMMember:IAMMember",
        "eos-runtime-extra",
        "urn:extra",
        {
            "role": "roles/run.admin",
            "member": member_of(settings, Account.RUNTIME),
        },
        {},
    )
    grown = MockedStack([*stack.resources, extra], stack.component_outputs)
    assert set(made(settings, grown)) - rows() == {("RUNTIME", "roles/run.admin", "PROJECT")}


# A predefined role as IAM spells one: `roles/<service>.<role>`, or `roles/<basic role>`.
ROLE = re.compile(r"^roles/[A-Za-z]+(\.[A-Za-z]+)?$")
RULES_CONFIG = REPO_ROOT / "policy" / "scheduler_guardrails" / "rules" / "config"
TABLE = RULES_CONFIG / "grants.py"
# Who may impersonate the CI accounts: granted to GitHub's principals, not to an account of the
# table, and the role the policy pack reads impersonation by.
IMPERSONATION = RULES_CONFIG / "github_oidc.py"


def test_no_module_of_the_program_or_the_bootstrap_spells_a_role_but_the_table() -> None:
    """A role written anywhere else is a grant the table, the pack and the docs do not see."""
    spelt = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {text}"
        for folder in ("infra", "bootstrap", "tools")
        for path in python_sources(REPO_ROOT / folder)
        if path not in (TABLE, IMPERSONATION)
        for line, text in string_constants(path.read_text(encoding="utf-8"))
        if ROLE.match(text)
    ]
    assert spelt == []
    assert any(ROLE.match(text) for _, text in string_constants(TABLE.read_text(encoding="utf-8")))


def test_the_token_checks_grant_is_made_for_the_samples_that_call_it() -> None:
    """The table names the kinds whose samples call the token check; the kinds say it too
    (`sample_calls_token_check`), and the program deploys the check by theirs."""
    calling = {kind.key for kind in TARGET_KINDS if kind.sample_calls_token_check}
    rows = [g for g in grants_present(TARGET_KEYS, STACK_GRANTS) if g.account is Account.TOKEN_CHECK]
    assert {kind for row in rows for kind in row.kinds} == calling
    assert all(when.sample for row in rows for when in row.when)
