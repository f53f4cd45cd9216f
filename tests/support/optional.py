"""Marks for tests of the template's behaviour that an optional part (tools/optional_parts.py)
provides, outside that part's own files: a fork that deleted the part skips them rather than
failing on what it chose not to have."""

from __future__ import annotations

import pytest

from tools.optional_parts import pruned

# The Workflows, Cloud Run job and BigQuery target kinds: the policy pack allows their project
# roles only while the kinds are present (policy/identities/allowlist.py asks the registry).
needs_proxy_kinds = pytest.mark.skipif(
    pruned("infra/targets/workflow.py"), reason="the proxy kinds were deleted (tools/optional_parts.py)"
)
