"""Every policy of the pack over a list of mocked resources, as the engine would apply them.

The same path as the main stack's pack tests (policy/scheduler_guardrails/offline.py): resource policies see
the inputs, stack policies the outputs; in preview, values Google computes are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policy.scheduler_guardrails.offline import UNKNOWN_STRING
from policy.scheduler_guardrails.offline import violations as all_violations
from tools.mocked_program import MockedResource

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
    if not preview:
        return all_violations((r.type, r.name, r.inputs, r.outputs) for r in resources)
    return all_violations(
        (r.type, r.name, as_in_preview(r, r.inputs), as_in_preview(r, r.outputs)) for r in resources
    )
