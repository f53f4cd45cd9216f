"""Marks for tests of the template's behaviour that a deletable piece provides, outside that
piece's own files: a checkout without the piece skips them rather than failing on what it chose
not to have."""

from __future__ import annotations

import pytest

from policy.scheduler_guardrails.rules.targets.kind import TargetKind
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from tools.optional_parts import pruned

# The Workflows, Cloud Run job and BigQuery target kinds: the policy pack allows their project
# roles only while the kinds are present (policy/scheduler_guardrails/identities/allowlist.py asks the
# registry).
# Deleted is what git says (tools/optional_parts.py), whatever compiled modules are left.
needs_proxy_kinds = pytest.mark.skipif(
    pruned("policy/scheduler_guardrails/rules/targets/workflow.py"), reason="the proxy kinds were deleted"
)


def proxy_kind(key: str) -> TargetKind:
    """The target kind with config key `key` (`workflow`, `bigquery`), for a test marked
    `needs_proxy_kinds`: it names the kind's handler as the registry has it, never by importing
    the kind's module, which a fork without the kinds does not have."""
    return next(kind for kind in TARGET_KINDS if kind.key == key)
