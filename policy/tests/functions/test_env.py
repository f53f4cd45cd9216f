"""What a deployed function's environment may not hold (functions/env.py): the tests'
switches (function-no-test-switches) and plain secrets (secrets-by-reference)."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from ...scheduler_guardrails.offline import UNKNOWN_STRING, resource_policy, run_resource_policy
from ...scheduler_guardrails.policies import CLOUD_RUN_V2_SERVICE, FUNCTION_V1, FUNCTION_V2
from .. import fixtures


def test_levels() -> None:
    for name in ("function-no-test-switches", "secrets-by-reference"):
        assert resource_policy(name).enforcement_level == EnforcementLevel.MANDATORY


# --- function-no-test-switches --------------------------------------------------------------


def switches(resource_type: str, props: dict[str, Any]) -> list[str]:
    return run_resource_policy(resource_policy("function-no-test-switches"), resource_type, props, "fn")


def v2_with(env: dict[str, Any]) -> dict[str, Any]:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"].update(env)
    return function


def test_plaintext_workflows_endpoint_is_rejected() -> None:
    [message] = switches(FUNCTION_V2, v2_with({"WORKFLOWS_API_ENDPOINT": "http://127.0.0.1:8081"}))
    assert "WORKFLOWS_API_ENDPOINT='http://127.0.0.1:8081'" in message and "Remove it" in message


@pytest.mark.parametrize("value", ["1", "0", ""])
def test_id_token_switch_is_rejected_whatever_its_value(value: str) -> None:
    [message] = switches(FUNCTION_V2, v2_with({"DOWNSTREAM_ID_TOKEN_DISABLED": value}))
    assert "DOWNSTREAM_ID_TOKEN_DISABLED is set" in message and "test-only" in message


def test_tls_endpoint_and_no_switches_pass() -> None:
    assert switches(FUNCTION_V2, fixtures.function()) == []
    assert (
        switches(FUNCTION_V2, v2_with({"WORKFLOWS_API_ENDPOINT": "https://workflowexecutions.example:443"}))
        == []
    )
    assert switches(FUNCTION_V2, v2_with({"WORKFLOWS_API_ENDPOINT": "private.googleapis.com"})) == []


def test_switches_on_v1_functions_and_cloud_run_are_rejected() -> None:
    v1 = {"environmentVariables": {"DOWNSTREAM_ID_TOKEN_DISABLED": "1"}}
    assert len(switches(FUNCTION_V1, v1)) == 1
    service = {
        "template": {
            "containers": [
                {
                    "envs": [
                        {"name": "A", "value": "b"},
                        {"name": "WORKFLOWS_API_ENDPOINT", "value": "HTTP://x:1"},
                    ]
                }
            ]
        }
    }
    [message] = switches(CLOUD_RUN_V2_SERVICE, service)
    assert "WORKFLOWS_API_ENDPOINT" in message


def test_unknown_env_is_not_reported() -> None:
    env = {"WORKFLOWS_API_ENDPOINT": UNKNOWN_STRING, "DOWNSTREAM_ID_TOKEN_DISABLED": UNKNOWN_STRING}
    assert switches(FUNCTION_V2, v2_with(env)) == []
    unknown_env = fixtures.function()
    unknown_env["serviceConfig"]["environmentVariables"] = UNKNOWN_STRING
    assert switches(FUNCTION_V2, unknown_env) == []
    assert switches(CLOUD_RUN_V2_SERVICE, {"template": {"containers": UNKNOWN_STRING}}) == []
    assert (
        switches(CLOUD_RUN_V2_SERVICE, {"template": {"containers": [{"envs": [{"name": UNKNOWN_STRING}]}]}})
        == []
    )


@pytest.mark.parametrize(
    "variable", ["CLOUD_RUN_API_ENDPOINT", "BIGQUERY_API_ENDPOINT", "WORKFLOWS_API_ENDPOINT"]
)
def test_a_plaintext_endpoint_switch_is_refused_for_every_target(variable: str) -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"][variable] = "http://127.0.0.1:9000"
    [message] = run_resource_policy(resource_policy("function-no-test-switches"), FUNCTION_V2, function)
    assert variable in message


# --- secrets-by-reference -------------------------------------------------------------------


def secrets_reported(resource_type: str, props: dict[str, Any]) -> list[str]:
    return run_resource_policy(resource_policy("secrets-by-reference"), resource_type, props)


@pytest.mark.parametrize(
    "name", ["DB_PASSWORD", "STRIPE_SECRET", "API_KEY", "GITHUB_TOKEN", "GCP_CREDENTIALS"]
)
def test_a_plain_variable_that_says_secret_is_refused(name: str) -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"][name] = "hunter2"
    [message] = secrets_reported(FUNCTION_V2, function)
    assert name in message and "Secret Manager" in message


def test_references_and_ordinary_names_pass() -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"].update(
        {
            "DOWNSTREAM_ID_TOKEN_DISABLED": "0",
            "IDEMPOTENCY_COLLECTION": "t",
            "SORT_KEYS": "1",
            "DB_PASSWORD": "",
        }
    )
    function["serviceConfig"]["secretEnvironmentVariables"] = [
        {"key": "API_KEY", "projectId": "my-project", "secret": "api-key", "version": "3"}
    ]
    assert secrets_reported(FUNCTION_V2, function) == []


def test_cloud_run_jobs_and_services_are_checked_too() -> None:
    plain = {"name": "API_KEY", "value": "abc"}
    reference = {"name": "DB_PASSWORD", "valueSource": {"secretKeyRef": {"secret": "db", "version": "1"}}}
    job = {"template": {"template": {"containers": [{"image": "i", "envs": [plain, reference]}]}}}
    [message] = secrets_reported("gcp:cloudrunv2/job:Job", job)
    assert "API_KEY" in message
    service = {"template": {"containers": [{"image": "i", "envs": [reference]}]}}
    assert secrets_reported("gcp:cloudrunv2/service:Service", service) == []
