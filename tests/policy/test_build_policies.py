"""The build policies: functions build as a dedicated account, and roles/logging.logWriter is
held project-wide only by that build account."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from policy.policies import FUNCTION_V1, FUNCTION_V2, PROJECT_IAM_MEMBER
from tests.policy import fixtures
from tests.policy.runner import (
    UNKNOWN_STRING,
    resource_policy,
    run_resource_policy,
    run_stack_policy,
    stack_policy,
    stack_resource,
)


def build_check(resource_type: str, props: dict[str, Any]) -> list[str]:
    return run_resource_policy(resource_policy("function-build-service-account"), resource_type, props, "fn")


def with_build_account(account: Any) -> dict[str, Any]:
    function = fixtures.function()
    function["buildConfig"]["serviceAccount"] = account
    return function


def test_level_is_mandatory() -> None:
    assert resource_policy("function-build-service-account").enforcement_level == EnforcementLevel.MANDATORY


def test_dedicated_build_account_passes_in_either_form() -> None:
    assert build_check(FUNCTION_V2, fixtures.function()) == []
    assert build_check(FUNCTION_V2, with_build_account(fixtures.BUILDER_SA)) == []
    v1 = {"buildServiceAccount": f"projects/my-project/serviceAccounts/{fixtures.BUILDER_SA}"}
    assert build_check(FUNCTION_V1, v1) == []


def test_missing_build_account_is_rejected() -> None:
    function = fixtures.function()
    del function["buildConfig"]["serviceAccount"]
    [message] = build_check(FUNCTION_V2, function)
    assert "buildConfig.serviceAccount is not set" in message and "default compute account" in message
    assert "roles/logging.logWriter" in message
    [message] = build_check(FUNCTION_V1, {})
    assert "buildServiceAccount is not set" in message


@pytest.mark.parametrize(
    "account",
    [
        "projects/my-project/serviceAccounts/123456789-compute@developer.gserviceaccount.com",
        "123456789@cloudbuild.gserviceaccount.com",
        "projects/-/serviceAccounts/my-project@appspot.gserviceaccount.com",
    ],
)
def test_default_build_accounts_are_rejected(account: str) -> None:
    [message] = build_check(FUNCTION_V2, with_build_account(account))
    assert f"'{account}' is a default account" in message


def test_unknown_build_account_is_not_reported() -> None:
    assert build_check(FUNCTION_V2, with_build_account(UNKNOWN_STRING)) == []
    assert build_check(FUNCTION_V2, fixtures.function() | {"buildConfig": UNKNOWN_STRING}) == []
    assert build_check(FUNCTION_V1, {"buildServiceAccount": UNKNOWN_STRING}) == []


# --- roles/logging.logWriter belongs to the build account --------------------------------------


def holders(function: dict[str, Any], member: str) -> list[str]:
    found = stack_policy("project-role-holders")
    grant = {"project": "my-project", "role": "roles/logging.logWriter", "member": member}
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", function),
        stack_resource(PROJECT_IAM_MEMBER, "eos-builder-log-writer", grant),
    ]
    return run_stack_policy(found, resources).messages


def test_log_writer_for_the_build_account_passes() -> None:
    assert holders(fixtures.function(), f"serviceAccount:{fixtures.BUILDER_SA}") == []


def test_log_writer_for_the_runtime_account_is_rejected() -> None:
    [message] = holders(fixtures.function(), f"serviceAccount:{fixtures.RUNTIME_SA}")
    assert "roles/logging.logWriter is granted project-wide" in message
    assert "the build account (buildConfig.serviceAccount)" in message and fixtures.BUILDER_SA in message


def test_log_writer_with_unknown_build_account_is_not_reported() -> None:
    assert holders(with_build_account(UNKNOWN_STRING), f"serviceAccount:{fixtures.RUNTIME_SA}") == []
