"""Every policy's violations on a mocked stack, as `pulumi up` sees its resources and as a first
`pulumi preview` does, before any of them exists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policy.scheduler_guardrails.offline import UNKNOWN_STRING, violations
from policy.scheduler_guardrails.timing.invariants import is_unjudged_notice
from tools.mocked_program import MockedResource

# Values a fresh stack's preview cannot know: they come from resources not yet created.
_COMPUTED_KEYS = frozenset({"url", "uri", "audience", "serviceAccountEmail", "member", "email", "bucket"})


def as_in_preview(value: Any) -> Any:
    """`value` with what a first preview cannot know yet replaced by the engine's unknown."""
    if isinstance(value, Mapping):
        return {k: UNKNOWN_STRING if k in _COMPUTED_KEYS else as_in_preview(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_in_preview(v) for v in value]
    return value


def stack_violations(resources: Iterable[MockedResource], preview: bool) -> list[str]:
    """Every violation of every policy: resource policies see inputs, stack policies outputs."""
    convert = as_in_preview if preview else (lambda props: props)
    return violations((r.type, r.name, convert(r.inputs), convert(r.outputs)) for r in resources)


def judged_in_preview(found: Iterable[str]) -> list[str]:
    """`found` less the advisory that names the rules a first preview cannot judge without the
    job table, which every first preview of a stack with a job table reports."""
    return [violation for violation in found if not is_unjudged_notice(violation)]
