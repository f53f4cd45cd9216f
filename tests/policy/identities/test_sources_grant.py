"""The build account may read gcf-v2-sources-<number>-<region> through a project grant, but
only with exactly the condition naming that bucket, and only the build account may hold it."""

from __future__ import annotations

from typing import Any

import pytest

from infra.resources.build import sources_read_condition
from policy.scheduler_guardrails.offline import (
    UNKNOWN_STRING,
    resource_policy,
    run_resource_policy,
    run_stack_policy,
    stack_policy,
    stack_resource,
)
from policy.scheduler_guardrails.policies import FUNCTION_V2, PROJECT_IAM_MEMBER
from policy.tests import fixtures

VIEWER = "roles/storage.objectViewer"


def grant(member: str = f"serviceAccount:{fixtures.BUILDER_SA}", condition: Any = None) -> dict[str, Any]:
    props: dict[str, Any] = {"project": "my-project", "role": VIEWER, "member": member}
    if condition is not None:
        props["condition"] = condition
    return props


def allowlist(props: dict[str, Any]) -> list[str]:
    return run_resource_policy(resource_policy("project-iam-allowlist"), PROJECT_IAM_MEMBER, props, "viewer")


def holders(props: dict[str, Any]) -> list[str]:
    resources = [
        stack_resource(FUNCTION_V2, "fn", fixtures.function()),
        stack_resource(PROJECT_IAM_MEMBER, "viewer", props),
    ]
    return run_stack_policy(stack_policy("project-role-holders"), resources).messages


def test_the_stacks_own_conditioned_grant_passes() -> None:
    props = grant(condition=sources_read_condition("123456789012", "europe-west1"))
    assert allowlist(props) == [] and holders(props) == []


def test_the_grant_without_a_condition_is_refused() -> None:
    [message] = allowlist(grant())
    assert f"{VIEWER} has no condition" in message and "gcf-v2-sources-<number>-<region>" in message


@pytest.mark.parametrize(
    "expression",
    [
        'resource.name.startsWith("projects/_/buckets/")',
        'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-123456789012-us-central1")',
        'resource.name == "projects/_/buckets/gcf-v2-sources-1-us-central1" || '
        'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-2-us-central1/")',
        'resource.name == "projects/_/buckets/my-data" || '
        'resource.name.startsWith("projects/_/buckets/my-data/")',
        "true",
    ],
)
def test_a_broader_or_other_condition_is_refused(expression: str) -> None:
    [message] = allowlist(grant(condition={"title": "t", "expression": expression}))
    assert f"has condition '{expression}'" in message


def test_another_account_may_not_hold_it() -> None:
    props = grant(f"serviceAccount:{fixtures.RUNTIME_SA}", sources_read_condition("1", "us-central1"))
    assert allowlist(props) == []  # the role and condition are fine ...
    [message] = holders(props)  # ... but only the build account may hold them
    assert "the build account" in message and fixtures.RUNTIME_SA in message


def test_an_unknown_condition_in_preview_is_not_judged() -> None:
    assert allowlist(grant(condition={"title": "t", "expression": UNKNOWN_STRING})) == []
