"""Resources the policy tests craft by hand, and a policy run on one of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..scheduler_guardrails.offline import resource_policy, run_resource_policy

# Resource types the policy tests craft that the pack names nowhere itself.
RUN_INVOKER_MEMBER = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
RUN_INVOKER_BINDING = "gcp:cloudrunv2/serviceIamBinding:ServiceIamBinding"
FUNCTION_IAM_MEMBER = "gcp:cloudfunctionsv2/functionIamMember:FunctionIamMember"
FUNCTION_V1_IAM_MEMBER = "gcp:cloudfunctions/functionIamMember:FunctionIamMember"
BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
BUCKET_IAM_POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"


def check(name: str, resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The messages the resource policy `name` reports for one crafted resource."""
    return run_resource_policy(resource_policy(name), resource_type, props, name="crafted")
