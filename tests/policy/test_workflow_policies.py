"""The sample workflow policies: no direct Google API jobs, no test switches, a TTL on the token
collection, and each allow-listed project role held only by the account it is listed for."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel, PolicyResource

from policy.policies import (
    CLOUD_RUN_V2_SERVICE,
    FIRESTORE_FIELD,
    FUNCTION_V1,
    FUNCTION_V2,
    PROJECT_IAM_MEMBER,
    SCHEDULER_JOB,
)
from tests.policy import fixtures
from tests.policy.runner import (
    UNKNOWN_STRING,
    Reported,
    resource_policy,
    run_resource_policy,
    run_stack_policy,
    stack_policy,
    stack_resource,
)

WORKFLOWS_HANDLER = "jobs.workflows:start_workflow_execution"
OTHER_SA = "someone@my-project.iam.gserviceaccount.com"


def test_levels() -> None:
    for name in ("scheduler-job-no-direct-google-api", "function-no-test-switches"):
        assert resource_policy(name).enforcement_level == EnforcementLevel.MANDATORY
    for name in ("idempotency-collection-ttl", "project-role-holders"):
        assert stack_policy(name).enforcement_level == EnforcementLevel.MANDATORY


# --- scheduler-job-no-direct-google-api ------------------------------------------------------


def direct(uri: Any) -> list[str]:
    job = fixtures.job()
    job["httpTarget"]["uri"] = uri
    return run_resource_policy(resource_policy("scheduler-job-no-direct-google-api"), SCHEDULER_JOB, job, "j")


@pytest.mark.parametrize(
    "uri",
    [
        "https://workflowexecutions.googleapis.com/v1/projects/p/locations/l/workflows/w/executions",
        "https://WorkflowExecutions.GoogleAPIs.com./v1/x",
        "https://run.googleapis.com/v2/projects/p/locations/l/jobs/j:run",
    ],
)
def test_job_calling_a_google_api_directly_is_rejected(uri: str) -> None:
    [message] = direct(uri)
    assert "Scheduler job 'j'" in message and "calls a Google API directly" in message
    assert "Route it through the dedup proxy" in message and "docs/proxy.md" in message


@pytest.mark.parametrize(
    "uri",
    [fixtures.FUNCTION_URL, "https://googleapis.com.example.org/x", "https://notgoogleapis.com/x", "::bad"],
)
def test_function_uri_and_lookalike_hosts_pass(uri: str) -> None:
    assert direct(uri) == []


def test_unknown_or_missing_uri_is_not_reported() -> None:
    assert direct(UNKNOWN_STRING) == []
    no_target = fixtures.job()
    del no_target["httpTarget"]
    policy = resource_policy("scheduler-job-no-direct-google-api")
    assert run_resource_policy(policy, SCHEDULER_JOB, no_target) == []


# --- function-no-test-switches ----------------------------------------------------------------


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


# --- idempotency-collection-ttl ----------------------------------------------------------------


def token_check(env: dict[str, Any] | None = None) -> dict[str, Any]:
    function = fixtures.function()
    function["name"] = "eos-token-check"
    function["url"] = function["serviceConfig"]["uri"] = "https://eos-token-check-xyz-uc.a.run.app"
    function["buildConfig"] = {"entryPoint": "check_idempotency_token", "runtime": "python312"}
    function["serviceConfig"]["environmentVariables"] = {
        "FIRESTORE_DATABASE": "scheduler-dedup",
        "IDEMPOTENCY_COLLECTION": "idempotency_tokens",
        "IDEMPOTENCY_RETENTION_SECONDS": "604800",
    } | (env or {})
    return function


def tokens_field(collection: str = "idempotency_tokens") -> dict[str, Any]:
    return fixtures.ttl_field() | {"collection": collection}


def ttl_stack(*fields: dict[str, Any], token: dict[str, Any] | None = None) -> list[PolicyResource]:
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", fixtures.function()),
        stack_resource(SCHEDULER_JOB, "eos-job-demo", fixtures.job()),
        stack_resource(FIRESTORE_FIELD, "eos-runs-ttl", fixtures.ttl_field()),
    ]
    if token is not None:
        resources.append(stack_resource(FUNCTION_V2, "eos-token-check", token))
    resources += [stack_resource(FIRESTORE_FIELD, f"f{i}", f) for i, f in enumerate(fields)]
    return resources


def token_ttl(resources: list[PolicyResource]) -> Reported:
    return run_stack_policy(stack_policy("idempotency-collection-ttl"), resources)


def test_token_check_without_a_ttl_on_its_collection_is_rejected() -> None:
    [(message, urn)] = token_ttl(ttl_stack(token=token_check())).violations
    assert urn is None
    assert (
        "its collection 'idempotency_tokens' has no TTL field" in message and "field='expire_at'" in message
    )


def test_token_check_with_its_ttl_passes_and_no_token_check_needs_none() -> None:
    assert token_ttl(ttl_stack(tokens_field(), token=token_check())).violations == []
    assert token_ttl(ttl_stack()).violations == []


def test_token_collection_comes_from_env_with_the_function_default() -> None:
    custom = token_check({"IDEMPOTENCY_COLLECTION": "tokens_b"})
    [(message, _)] = token_ttl(ttl_stack(tokens_field(), token=custom)).violations
    assert "'tokens_b'" in message
    assert token_ttl(ttl_stack(tokens_field("tokens_b"), token=custom)).violations == []
    defaulted = token_check()
    del defaulted["serviceConfig"]["environmentVariables"]["IDEMPOTENCY_COLLECTION"]
    assert len(token_ttl(ttl_stack(token=defaulted)).violations) == 1
    assert token_ttl(ttl_stack(tokens_field(), token=defaulted)).violations == []


def test_unknown_token_collection_or_field_collection_is_not_a_false_positive() -> None:
    unknown = token_check({"IDEMPOTENCY_COLLECTION": UNKNOWN_STRING})
    # Unknown collection: the runs TTL field counts as "some expire_at field".
    assert token_ttl(ttl_stack(token=unknown)).violations == []
    unknown_field = tokens_field(UNKNOWN_STRING)
    assert token_ttl(ttl_stack(unknown_field, token=token_check())).violations == []


def test_token_check_is_not_a_ledger_function_for_the_runs_ttl() -> None:
    # Its env has no RUNS_COLLECTION; it must not demand a TTL on the default 'scheduler_runs'.
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["RUNS_COLLECTION"] = "runs_b"
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", function),
        stack_resource(FUNCTION_V2, "eos-token-check", token_check()),
        stack_resource(FIRESTORE_FIELD, "runs", fixtures.ttl_field() | {"collection": "runs_b"}),
        stack_resource(FIRESTORE_FIELD, "tokens", tokens_field()),
    ]
    assert run_stack_policy(stack_policy("runs-collection-ttl"), resources).violations == []


def test_timing_pairs_jobs_with_the_dedup_function_not_the_token_check() -> None:
    job = fixtures.job()
    job["httpTarget"]["uri"] = job["httpTarget"]["oidcToken"]["audience"] = UNKNOWN_STRING
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", fixtures.function()),
        stack_resource(FUNCTION_V2, "eos-token-check", token_check()),
        stack_resource(SCHEDULER_JOB, "eos-job-demo", job),
    ]
    for name in ("scheduler-timing-invariants", "scheduler-timing-advisories"):
        assert run_stack_policy(stack_policy(name), resources).violations == []


# --- project-role-holders ----------------------------------------------------------------------


def proxy_function(**env: str) -> dict[str, Any]:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"] |= {
        "JOB_HANDLER": "jobs.demo:run_demo_job",
        "JOB_HANDLERS": json.dumps({"report": WORKFLOWS_HANDLER}),
    } | env
    return function


def grant(role: str, account: Any) -> dict[str, Any]:
    member = account if account == UNKNOWN_STRING else f"serviceAccount:{account}"
    return {"project": "my-project", "role": role, "member": member}


def holders(function: dict[str, Any], *grants: dict[str, Any]) -> Reported:
    resources = [stack_resource(FUNCTION_V2, "eos-function", function)]
    resources += [stack_resource(PROJECT_IAM_MEMBER, f"grant-{i}", g) for i, g in enumerate(grants)]
    return run_stack_policy(stack_policy("project-role-holders"), resources)


def test_workflows_invoker_for_the_proxy_functions_runtime_account_passes() -> None:
    reported = holders(
        proxy_function(),
        grant("roles/workflows.invoker", fixtures.RUNTIME_SA),
        fixtures.datastore_grant(),
    )
    assert reported.violations == []


def test_workflows_invoker_via_job_handler_alone_passes() -> None:
    function = proxy_function(JOB_HANDLER=WORKFLOWS_HANDLER, JOB_HANDLERS="{}")
    assert holders(function, grant("roles/workflows.invoker", fixtures.RUNTIME_SA.upper())).violations == []


def test_workflows_invoker_for_another_account_is_rejected() -> None:
    [(message, urn)] = holders(proxy_function(), grant("roles/workflows.invoker", OTHER_SA)).violations
    assert urn is not None and urn.endswith("::grant-0")
    assert f"roles/workflows.invoker is granted project-wide to 'serviceAccount:{OTHER_SA}'" in message
    assert "whose JOB_HANDLER(S) use jobs.workflows" in message and fixtures.RUNTIME_SA in message


def test_workflows_invoker_without_a_proxy_job_is_rejected() -> None:
    [(message, _)] = holders(
        fixtures.function(), grant("roles/workflows.invoker", fixtures.RUNTIME_SA)
    ).violations
    assert "found: none in this stack" in message and "needs no grant" in message


def test_datastore_user_for_a_non_runtime_account_is_rejected() -> None:
    other = fixtures.datastore_grant() | {"member": f"serviceAccount:{OTHER_SA}"}
    [(message, _)] = holders(fixtures.function(), other).violations
    assert "roles/datastore.user" in message and "the runtime account of a function in this stack" in message


def test_not_allow_listed_or_non_service_account_grants_are_left_to_the_allowlist_policy() -> None:
    assert holders(fixtures.function(), grant("roles/pubsub.publisher", OTHER_SA)).violations == []
    user = {"role": "roles/datastore.user", "member": "user:someone@example.com"}
    assert holders(fixtures.function(), user).violations == []


def test_unknown_member_account_or_handlers_are_not_reported() -> None:
    assert holders(proxy_function(), grant("roles/workflows.invoker", UNKNOWN_STRING)).violations == []
    unknown_account = proxy_function()
    unknown_account["serviceConfig"]["serviceAccountEmail"] = UNKNOWN_STRING
    assert holders(unknown_account, grant("roles/workflows.invoker", OTHER_SA)).violations == []
    unknown_handlers = proxy_function(JOB_HANDLERS=UNKNOWN_STRING)
    assert holders(unknown_handlers, grant("roles/workflows.invoker", OTHER_SA)).violations == []
    unknown_service = fixtures.function() | {"serviceConfig": UNKNOWN_STRING}
    assert holders(unknown_service, grant("roles/workflows.invoker", OTHER_SA)).violations == []
