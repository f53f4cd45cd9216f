"""Roles no grant may carry as they are (identities/roles.py): no-primitive-roles and
datastore-user-conditional. A crafted violation is reported with a useful message, a close
variant that is fine is not, and preview-time unknowns are skipped without a crash."""

from __future__ import annotations

import json

import pytest

from ...scheduler_guardrails.offline import UNKNOWN_STRING
from ...scheduler_guardrails.policies import PROJECT_IAM_MEMBER
from .. import fixtures
from ..crafted import RUN_INVOKER_MEMBER, check

# --- no-primitive-roles ---------------------------------------------------------------------


@pytest.mark.parametrize("role", ["roles/owner", "roles/editor", "roles/viewer"])
def test_primitive_roles_are_reported(role: str) -> None:
    grant = fixtures.run_invoker_grant() | {"role": role}
    [message] = check("no-primitive-roles", RUN_INVOKER_MEMBER, grant)
    assert f"role {role}" in message and "primitive" in message and "narrowest predefined role" in message


def test_predefined_role_passes_and_policy_data_is_checked() -> None:
    assert check("no-primitive-roles", RUN_INVOKER_MEMBER, fixtures.run_invoker_grant()) == []
    data = {"bindings": [{"role": "roles/editor", "members": [f"serviceAccount:{fixtures.RUNTIME_SA}"]}]}
    [message] = check(
        "no-primitive-roles", "gcp:projects/iAMPolicy:IAMPolicy", {"policyData": json.dumps(data)}
    )
    assert "roles/editor" in message


def test_unknown_role_is_not_reported() -> None:
    grant = fixtures.run_invoker_grant() | {"role": UNKNOWN_STRING}
    assert check("no-primitive-roles", RUN_INVOKER_MEMBER, grant) == []


# --- datastore-user-conditional -------------------------------------------------------------


def test_conditional_datastore_grant_passes() -> None:
    assert check("datastore-user-conditional", PROJECT_IAM_MEMBER, fixtures.datastore_grant()) == []


@pytest.mark.parametrize("condition", [None, {"title": "t", "expression": ""}])
def test_unconditional_datastore_grant_is_reported(condition: dict[str, str] | None) -> None:
    grant = fixtures.datastore_grant()
    if condition is None:
        del grant["condition"]
    else:
        grant["condition"] = condition
    [message] = check("datastore-user-conditional", PROJECT_IAM_MEMBER, grant)
    assert "roles/datastore.user" in message and "has no condition" in message
    assert "condition {title, expression}" in message


def test_unknown_condition_is_not_reported() -> None:
    grant = fixtures.datastore_grant()
    grant["condition"] = UNKNOWN_STRING
    assert check("datastore-user-conditional", PROJECT_IAM_MEMBER, grant) == []
    grant["condition"] = {"title": "t", "expression": UNKNOWN_STRING}
    assert check("datastore-user-conditional", PROJECT_IAM_MEMBER, grant) == []
