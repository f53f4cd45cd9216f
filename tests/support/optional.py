"""Marks for tests of the template's behaviour that a deletable piece provides, outside that
piece's own files: a checkout without the piece skips them rather than failing on what it chose
not to have."""

from __future__ import annotations

import pytest

from infra.config.paths import REPO_ROOT

# The Workflows, Cloud Run job and BigQuery target kinds: the policy pack allows their project
# roles only while the kinds are present (policy/identities/allowlist.py asks the registry).
needs_proxy_kinds = pytest.mark.skipif(
    not (REPO_ROOT / "infra/targets/workflow.py").exists(), reason="the proxy kinds were deleted"
)
