"""Who a function runs and builds as (functions/identity.py): function-dedicated-service-account
and function-build-service-account."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from ...scheduler_guardrails.offline import UNKNOWN_STRING, resource_policy, run_resource_policy
from ...scheduler_guardrails.policies import CLOUD_RUN_V2_SERVICE, FUNCTION_V1, FUNCTION_V2
from .. import fixtures
from ..crafted import check

# --- function-dedicated-service-account -----------------------------------------------------


def test_dedicated_runtime_account_passes() -> None:
    assert check("function-dedicated-service-account", FUNCTION_V2, fixtures.function()) == []


def test_missing_runtime_account_is_reported() -> None:
    function = fixtures.function()
    del function["serviceConfig"]["serviceAccountEmail"]
    [message] = check("function-dedicated-service-account", FUNCTION_V2, function)
    assert "serviceConfig.serviceAccountEmail is not set" in message and "dedicated" in message


def test_default_compute_account_is_reported() -> None:
    function = fixtures.function()
    function["serviceConfig"]["serviceAccountEmail"] = "123456789-compute@developer.gserviceaccount.com"
    [message] = check("function-dedicated-service-account", FUNCTION_V2, function)
    assert "default service account '123456789-compute@developer.gserviceaccount.com'" in message


def test_default_accounts_on_v1_function_and_cloud_run_are_reported() -> None:
    [v1] = check(
        "function-dedicated-service-account",
        FUNCTION_V1,
        {"serviceAccountEmail": "my-project@appspot.gserviceaccount.com"},
    )
    assert "property serviceAccountEmail" in v1
    [run] = check("function-dedicated-service-account", CLOUD_RUN_V2_SERVICE, {"template": {}})
    assert "template.serviceAccount is not set" in run
    ok = {"template": {"serviceAccount": fixtures.RUNTIME_SA}}
    assert check("function-dedicated-service-account", CLOUD_RUN_V2_SERVICE, ok) == []


def test_unknown_runtime_account_is_not_reported() -> None:
    function = fixtures.function()
    function["serviceConfig"]["serviceAccountEmail"] = UNKNOWN_STRING
    assert check("function-dedicated-service-account", FUNCTION_V2, function) == []
    function["serviceConfig"] = UNKNOWN_STRING
    assert check("function-dedicated-service-account", FUNCTION_V2, function) == []


# --- function-build-service-account ---------------------------------------------------------


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
