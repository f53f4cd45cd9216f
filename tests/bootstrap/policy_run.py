"""Every policy of the pack over a list of mocked resources, as the engine would apply them.

The same path as the main stack's pack tests (tests/policy/runner.py): resource policies see
the inputs, stack policies the outputs; in preview, values Google computes are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import ResourceValidationPolicy, StackValidationPolicy

from policy.policies import POLICIES
from tests.policy.runner import UNKNOWN_STRING, run_resource_policy, run_stack_policy, stack_resource
from tests.support.pulumi_harness import MockedResource

# Values a first preview cannot know: they name or derive from resources not yet created.
COMPUTED_KEYS = frozenset({"member", "email", "name", "url", "serviceAccountId", "cryptoKeyId", "keyRing"})
# Names the config chooses are known in preview: only these types' `name` is computed.
_COMPUTED_NAME_TYPES = frozenset(
    {
        "gcp:iam/workloadIdentityPool:WorkloadIdentityPool",
        "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider",
        "gcp:serviceaccount/account:Account",
    }
)


def as_in_preview(resource: MockedResource, props: Mapping[str, Any]) -> dict[str, Any]:
    unknown = COMPUTED_KEYS if resource.type in _COMPUTED_NAME_TYPES else COMPUTED_KEYS - {"name"}
    return {key: UNKNOWN_STRING if key in unknown else value for key, value in props.items()}


def violations(resources: list[MockedResource], preview: bool = False) -> list[str]:
    """'<policy> <resource>: <message>' for every violation, resource and stack policies alike."""
    found: list[str] = []
    stack = []
    for r in resources:
        inputs = as_in_preview(r, r.inputs) if preview else r.inputs
        outputs = as_in_preview(r, r.outputs) if preview else r.outputs
        stack.append(stack_resource(r.type, r.name, outputs))
        for policy in POLICIES:
            if isinstance(policy, ResourceValidationPolicy):
                found += [
                    f"{policy.name} {r.name}: {m}"
                    for m in run_resource_policy(policy, r.type, inputs, r.name)
                ]
    for policy in POLICIES:
        if isinstance(policy, StackValidationPolicy):
            found += [f"{policy.name}: {m}" for m in run_stack_policy(policy, stack).messages]
    return found
