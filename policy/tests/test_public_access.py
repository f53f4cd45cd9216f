"""What keeps the function, its source and its data from the public (public_access.py):
no-public-principals, function-ingress-restricted (advisory), source-bucket-private."""

from __future__ import annotations

import json

import pytest
from pulumi_policy import EnforcementLevel

from ..scheduler_guardrails.offline import UNKNOWN_BOOL, UNKNOWN_STRING, resource_policy
from ..scheduler_guardrails.policies import BUCKET, CLOUD_RUN_V2_SERVICE, FUNCTION_V2
from . import fixtures
from .crafted import (
    BUCKET_IAM_BINDING,
    BUCKET_IAM_POLICY,
    FUNCTION_IAM_MEMBER,
    FUNCTION_V1_IAM_MEMBER,
    RUN_INVOKER_BINDING,
    RUN_INVOKER_MEMBER,
    check,
)

# --- no-public-principals -------------------------------------------------------------------


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


# --- function-ingress-restricted (advisory) -------------------------------------------------


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


# --- source-bucket-private ------------------------------------------------------------------


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
