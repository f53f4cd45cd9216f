"""Every resource policy survives preview unknowns: the engine (engine/props.py) turns them
into values a check skips, so a fully unknown resource reports nothing and crashes nothing."""

from __future__ import annotations

import pytest
from pulumi_policy import ResourceValidationPolicy

from ...scheduler_guardrails.offline import UNKNOWN_BOOL, UNKNOWN_NUMBER, UNKNOWN_STRING, run_resource_policy
from ...scheduler_guardrails.policies import (
    BUCKET,
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_V1,
    FUNCTION_V2,
    POLICIES,
    PROJECT_IAM_MEMBER,
    SCHEDULER_JOB,
)
from ..crafted import RUN_INVOKER_MEMBER


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
