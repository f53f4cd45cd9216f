"""Each resource policy: a crafted violation is reported with a useful message, a close
variant that is fine is not, and preview-time unknowns are skipped without a crash."""

from __future__ import annotations

import json

import pytest
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy

from policy.policies import (
    BUCKET,
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_V1,
    FUNCTION_V2,
    POLICIES,
    PROJECT_IAM_MEMBER,
    SCHEDULER_JOB,
)
from tests.policy import fixtures
from tests.policy.runner import (
    BUCKET_IAM_BINDING,
    BUCKET_IAM_POLICY,
    FUNCTION_IAM_MEMBER,
    FUNCTION_V1_IAM_MEMBER,
    RUN_INVOKER_BINDING,
    RUN_INVOKER_MEMBER,
    UNKNOWN_BOOL,
    UNKNOWN_NUMBER,
    UNKNOWN_STRING,
    check,
    resource_policy,
    run_resource_policy,
)

# --- scheduler-job-oidc-auth -----------------------------------------------------------------


def test_job_with_oidc_token_and_audience_passes() -> None:
    assert check("scheduler-job-oidc-auth", SCHEDULER_JOB, fixtures.job()) == []


def test_job_without_any_token_is_unauthenticated() -> None:
    job = fixtures.job()
    del job["httpTarget"]["oidcToken"]
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "without authentication" in message
    assert "httpTarget.oidcToken" in message and "audience" in message


def test_job_with_oauth_token_is_told_to_use_oidc() -> None:
    job = fixtures.job()
    del job["httpTarget"]["oidcToken"]
    job["httpTarget"]["oauthToken"] = {"serviceAccountEmail": fixtures.INVOKER_SA}
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "oauthToken" in message and "Replace it with httpTarget.oidcToken" in message


@pytest.mark.parametrize("audience", [None, "", "  "])
def test_job_without_audience_is_reported(audience: str | None) -> None:
    job = fixtures.job()
    if audience is None:
        del job["httpTarget"]["oidcToken"]["audience"]
    else:
        job["httpTarget"]["oidcToken"]["audience"] = audience
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "httpTarget.oidcToken.audience is not set" in message


def test_job_without_token_account_is_reported() -> None:
    job = fixtures.job()
    job["httpTarget"]["oidcToken"]["serviceAccountEmail"] = ""
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "serviceAccountEmail is empty" in message


def test_job_with_unknown_audience_and_account_is_not_reported() -> None:
    # A new function's URI and a new account's email are unknown during preview.
    job = fixtures.job()
    job["httpTarget"]["oidcToken"] = {"serviceAccountEmail": UNKNOWN_STRING, "audience": UNKNOWN_STRING}
    job["httpTarget"]["uri"] = UNKNOWN_STRING
    assert check("scheduler-job-oidc-auth", SCHEDULER_JOB, job) == []
    job["httpTarget"] = UNKNOWN_STRING
    assert check("scheduler-job-oidc-auth", SCHEDULER_JOB, job) == []


def test_job_policies_ignore_other_resource_types() -> None:
    assert check("scheduler-job-oidc-auth", BUCKET, {"httpTarget": {"uri": "x"}}) == []


# --- scheduler-job-schedule-and-deadline -----------------------------------------------------


def test_unix_cron_schedule_and_deadline_in_range_pass() -> None:
    assert check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, fixtures.job()) == []


def test_groc_schedule_is_rejected_with_the_timing_module_reason() -> None:
    job = fixtures.job()
    job["schedule"] = "every 5 minutes"
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert "property schedule" in message
    assert "groc syntax" in message  # the reason comes from infra.timing.cron.unix_cron_error
    assert "'*/5 * * * *'" in message


def test_missing_schedule_is_reported() -> None:
    job = fixtures.job()
    del job["schedule"]
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert "schedule is missing" in message


@pytest.mark.parametrize("deadline", ["14s", "1801s", "3600s"])
def test_deadline_outside_range_is_reported(deadline: str) -> None:
    job = fixtures.job()
    job["attemptDeadline"] = deadline
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert f"attemptDeadline '{deadline}' is outside" in message and "15s..1800s" in message


@pytest.mark.parametrize("deadline", ["15s", "1800s", "3.5s0", "sixty"])
def test_deadline_edges_pass_and_garbage_is_reported(deadline: str) -> None:
    job = fixtures.job()
    job["attemptDeadline"] = deadline
    messages = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    if deadline in ("15s", "1800s"):
        assert messages == []
    else:
        [message] = messages
        assert "is not a duration" in message


def test_fractional_deadline_is_parsed() -> None:
    job = fixtures.job()
    job["attemptDeadline"] = "3.5s"
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert "'3.5s' is outside" in message


def test_unknown_schedule_and_deadline_are_not_reported() -> None:
    job = fixtures.job()
    job["schedule"] = UNKNOWN_STRING
    job["attemptDeadline"] = UNKNOWN_STRING
    assert check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job) == []


# --- no-public-principals --------------------------------------------------------------------


@pytest.mark.parametrize("resource_type", [RUN_INVOKER_MEMBER, FUNCTION_IAM_MEMBER, FUNCTION_V1_IAM_MEMBER])
@pytest.mark.parametrize("member", ["allUsers", "allAuthenticatedUsers"])
def test_public_member_on_function_or_service_is_reported(resource_type: str, member: str) -> None:
    grant = fixtures.run_invoker_grant() | {"member": member}
    [message] = check("no-public-principals", resource_type, grant)
    assert f"public principal '{member}'" in message and "roles/run.invoker" in message
    assert "serviceAccount:" in message


def test_specific_service_account_member_passes() -> None:
    assert check("no-public-principals", RUN_INVOKER_MEMBER, fixtures.run_invoker_grant()) == []


def test_public_member_in_binding_list_is_reported() -> None:
    binding = {"bucket": "src", "role": "roles/storage.objectViewer", "members": ["user:a@b.c", "allUsers"]}
    [message] = check("no-public-principals", BUCKET_IAM_BINDING, binding)
    assert "'allUsers'" in message and "property members" in message
    binding["members"] = ["user:a@b.c"]
    assert check("no-public-principals", BUCKET_IAM_BINDING, binding) == []


def test_public_member_in_inline_policy_data_is_reported() -> None:
    data = {"bindings": [{"role": "roles/storage.objectViewer", "members": ["allAuthenticatedUsers"]}]}
    [message] = check("no-public-principals", BUCKET_IAM_POLICY, {"policyData": json.dumps(data)})
    assert "policyData.bindings[0]" in message
    data["bindings"][0]["members"] = [f"serviceAccount:{fixtures.RUNTIME_SA}"]
    assert check("no-public-principals", BUCKET_IAM_POLICY, {"policyData": json.dumps(data)}) == []


def test_public_bucket_acl_and_invoker_iam_disabled_are_reported() -> None:
    [acl] = check(
        "no-public-principals", "gcp:storage/bucketACL:BucketACL", {"roleEntities": ["READER:allUsers"]}
    )
    assert "READER:allUsers" in acl and "uniformBucketLevelAccess" in acl
    owner_only = {"roleEntities": ["OWNER:project-owners-123"]}
    assert check("no-public-principals", "gcp:storage/bucketACL:BucketACL", owner_only) == []
    [run] = check("no-public-principals", CLOUD_RUN_V2_SERVICE, {"invokerIamDisabled": True})
    assert "invokerIamDisabled" in run
    assert check("no-public-principals", CLOUD_RUN_V2_SERVICE, {"invokerIamDisabled": False}) == []


def test_unknown_member_is_not_reported() -> None:
    grant = fixtures.run_invoker_grant() | {"member": UNKNOWN_STRING}
    assert check("no-public-principals", RUN_INVOKER_MEMBER, grant) == []
    binding = {"role": "roles/run.invoker", "members": [UNKNOWN_STRING, "user:a@b.c"]}
    assert check("no-public-principals", RUN_INVOKER_BINDING, binding) == []
    assert check("no-public-principals", CLOUD_RUN_V2_SERVICE, {"invokerIamDisabled": UNKNOWN_BOOL}) == []


# --- function-dedicated-service-account ------------------------------------------------------


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


# --- function-ingress-restricted (advisory) --------------------------------------------------


def test_ingress_policy_is_advisory() -> None:
    assert resource_policy("function-ingress-restricted").enforcement_level == EnforcementLevel.ADVISORY


def test_internal_ingress_passes_and_allow_all_is_reported() -> None:
    assert check("function-ingress-restricted", FUNCTION_V2, fixtures.function()) == []
    function = fixtures.function()
    function["serviceConfig"]["ingressSettings"] = "ALLOW_ALL"
    [message] = check("function-ingress-restricted", FUNCTION_V2, function)
    assert "serviceConfig.ingressSettings is ALLOW_ALL" in message and "ALLOW_INTERNAL_ONLY" in message
    assert "another project" in message


def test_missing_ingress_defaults_to_allow_all_and_is_reported() -> None:
    function = fixtures.function()
    del function["serviceConfig"]["ingressSettings"]
    [message] = check("function-ingress-restricted", FUNCTION_V2, function)
    assert "defaults to allow-all" in message
    [run] = check("function-ingress-restricted", CLOUD_RUN_V2_SERVICE, {"ingress": "INGRESS_TRAFFIC_ALL"})
    assert "INGRESS_TRAFFIC_INTERNAL_ONLY" in run


def test_unknown_ingress_is_not_reported() -> None:
    function = fixtures.function()
    function["serviceConfig"]["ingressSettings"] = UNKNOWN_STRING
    assert check("function-ingress-restricted", FUNCTION_V2, function) == []


# --- source-bucket-private -------------------------------------------------------------------


def test_private_bucket_passes() -> None:
    assert check("source-bucket-private", BUCKET, fixtures.bucket()) == []


def test_bucket_without_prevention_or_uniform_access_is_reported() -> None:
    [prevention, uniform] = check("source-bucket-private", BUCKET, {"location": "us-central1"})
    assert "publicAccessPrevention is not set" in prevention and "'enforced'" in prevention
    assert (
        "uniformBucketLevelAccess is not true" in uniform
        and "Set uniformBucketLevelAccess to true" in uniform
    )
    inherited = fixtures.bucket() | {"publicAccessPrevention": "inherited"}
    [message] = check("source-bucket-private", BUCKET, inherited)
    assert "publicAccessPrevention is 'inherited'" in message


def test_unknown_bucket_settings_are_not_reported() -> None:
    props = {"publicAccessPrevention": UNKNOWN_STRING, "uniformBucketLevelAccess": UNKNOWN_BOOL}
    assert check("source-bucket-private", BUCKET, props) == []


# --- every resource policy survives preview unknowns -----------------------------------------


@pytest.mark.parametrize("resource_policy", [p for p in POLICIES if isinstance(p, ResourceValidationPolicy)])
@pytest.mark.parametrize(
    "resource_type",
    [
        SCHEDULER_JOB,
        FUNCTION_V2,
        FUNCTION_V1,
        CLOUD_RUN_V2_SERVICE,
        BUCKET,
        PROJECT_IAM_MEMBER,
        RUN_INVOKER_MEMBER,
    ],
)
def test_fully_unknown_resources_report_nothing(
    resource_policy: ResourceValidationPolicy, resource_type: str
) -> None:
    props = {
        key: UNKNOWN_STRING
        for key in (
            "schedule",
            "attemptDeadline",
            "httpTarget",
            "serviceConfig",
            "serviceAccountEmail",
            "buildConfig",
            "buildServiceAccount",
            "ingressSettings",
            "template",
            "ingress",
            "publicAccessPrevention",
            "role",
            "member",
            "condition",
        )
    } | {"uniformBucketLevelAccess": UNKNOWN_BOOL, "timeoutSeconds": UNKNOWN_NUMBER}
    assert run_resource_policy(resource_policy, resource_type, props) == []
