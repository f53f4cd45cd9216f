"""The runtime account's access and the secrets a deployment reads: runtime-account-grants,
secrets-by-reference, the BigQuery proxy's one project role, and the endpoint switches."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel, PolicyResource

from infra.config.access import GRANT_KINDS
from policy.policies import FUNCTION_V2, PROJECT_IAM_MEMBER
from tests.policy import fixtures
from tests.policy.runner import (
    UNKNOWN_STRING,
    resource_policy,
    run_resource_policy,
    run_stack_policy,
    stack_policy,
    stack_resource,
)

RUNTIME = f"serviceAccount:{fixtures.RUNTIME_SA}"
JOB_MEMBER = "gcp:cloudrunv2/jobIamMember:JobIamMember"
DATASET_MEMBER = "gcp:bigquery/datasetIamMember:DatasetIamMember"
JOB = "projects/my-project/locations/us-central1/jobs/export"


def stack_with(
    grant_type: str, props: dict[str, Any], function: dict[str, Any] | None = None
) -> list[PolicyResource]:
    return [
        stack_resource(FUNCTION_V2, "eos-handler", function or fixtures.function()),
        stack_resource(grant_type, "grant", props),
    ]


def grants_reported(grant_type: str, props: dict[str, Any]) -> list[str]:
    return run_stack_policy(stack_policy("runtime-account-grants"), stack_with(grant_type, props)).messages


def test_levels() -> None:
    assert stack_policy("runtime-account-grants").enforcement_level == EnforcementLevel.MANDATORY
    assert resource_policy("secrets-by-reference").enforcement_level == EnforcementLevel.MANDATORY


@pytest.mark.parametrize(
    ("role", "instead"),
    [
        ("roles/run.developer", "roles/run.jobsExecutorWithOverrides"),
        ("roles/run.admin", "roles/run.jobsExecutorWithOverrides"),
        (
            "roles/bigquery.admin",
            "roles/bigquery.jobUser on the project and dataViewer/dataEditor per dataset",
        ),
        ("roles/bigquery.dataEditor", "on the datasets the job writes"),
    ],
)
def test_project_wide_cloud_run_and_broad_bigquery_roles_are_refused(role: str, instead: str) -> None:
    [message] = grants_reported(
        PROJECT_IAM_MEMBER, {"project": "my-project", "role": role, "member": RUNTIME}
    )
    assert role in message and "project-wide" in message and instead in message


def test_the_roles_the_stack_grants_pass() -> None:
    assert (
        grants_reported(
            JOB_MEMBER, {"name": "export", "role": "roles/run.jobsExecutorWithOverrides", "member": RUNTIME}
        )
        == []
    )
    assert (
        grants_reported(
            DATASET_MEMBER, {"datasetId": "sales", "role": "roles/bigquery.dataViewer", "member": RUNTIME}
        )
        == []
    )
    project = {"project": "my-project", "role": "roles/bigquery.jobUser", "member": RUNTIME}
    assert grants_reported(PROJECT_IAM_MEMBER, project) == []


@pytest.mark.parametrize(
    ("grant_type", "role"),
    [
        (JOB_MEMBER, "roles/run.admin"),
        (DATASET_MEMBER, "roles/bigquery.dataOwner"),
        (DATASET_MEMBER, "roles/bigquery.admin"),
    ],
)
def test_a_role_broader_than_its_kind_lists_is_refused(grant_type: str, role: str) -> None:
    [message] = grants_reported(
        grant_type, {"name": "export", "datasetId": "sales", "role": role, "member": RUNTIME}
    )
    assert role in message and "more than a job needs" in message


@pytest.mark.parametrize(
    "grant_type",
    [
        "gcp:storage/bucketIAMBinding:BucketIAMBinding",
        "gcp:folder/iAMMember:IAMMember",
        "gcp:organizations/iAMMember:IAMMember",
        "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember",
    ],
)
def test_grants_outside_the_listed_kinds_are_refused(grant_type: str) -> None:
    props = {"role": "roles/storage.objectViewer", "member": RUNTIME, "members": [RUNTIME], "bucket": "b"}
    messages = grants_reported(grant_type, props)
    assert messages and all("GRANT_KINDS" in message for message in messages)


def test_other_accounts_and_unknown_accounts_are_not_judged() -> None:
    other = {
        "name": "export",
        "role": "roles/run.admin",
        "member": "serviceAccount:someone@my-project.iam.gserviceaccount.com",
    }
    assert grants_reported(JOB_MEMBER, other) == []
    function = fixtures.function()
    function["serviceConfig"]["serviceAccountEmail"] = UNKNOWN_STRING
    resources = stack_with(
        JOB_MEMBER, {"name": "export", "role": "roles/run.admin", "member": RUNTIME}, function
    )
    assert run_stack_policy(stack_policy("runtime-account-grants"), resources).messages == []


def test_every_listed_kind_has_roles_and_none_of_them_administers() -> None:
    for kind in GRANT_KINDS:
        assert kind.roles and kind.resource_type.startswith("gcp:")
        assert not {
            role for role in kind.roles if role.endswith(("admin", "Admin", "Owner", "owner", "developer"))
        }


def test_job_user_is_held_only_by_the_bigquery_proxy_s_runtime_account() -> None:
    grant = {"project": "my-project", "role": "roles/bigquery.jobUser", "member": RUNTIME}
    plain = stack_with(PROJECT_IAM_MEMBER, grant)
    [message] = run_stack_policy(stack_policy("project-role-holders"), plain).messages
    assert "jobs.bigquery_job" in message
    function = fixtures.function()
    handlers = {"eos-prod_rollup": "jobs.bigquery_job:run_bigquery_job"}
    function["serviceConfig"]["environmentVariables"]["JOB_HANDLERS"] = json.dumps(handlers)
    proxy = stack_with(PROJECT_IAM_MEMBER, grant, function)
    assert run_stack_policy(stack_policy("project-role-holders"), proxy).messages == []


# --- secrets-by-reference -----------------------------------------------------------------------


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


@pytest.mark.parametrize(
    "variable", ["CLOUD_RUN_API_ENDPOINT", "BIGQUERY_API_ENDPOINT", "WORKFLOWS_API_ENDPOINT"]
)
def test_a_plaintext_endpoint_switch_is_refused_for_every_target(variable: str) -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"][variable] = "http://127.0.0.1:9000"
    [message] = run_resource_policy(resource_policy("function-no-test-switches"), FUNCTION_V2, function)
    assert variable in message
