"""Test-only, never part of the function: a ledger whose claim has lost its precondition.

Put first on a soak instance's PYTHONPATH (tests/localrun/soak/test_soak.py), Python imports this
module as the process starts, before the function is loaded, and it turns the store's
create() — the claim's "only if the record does not exist yet" — into a plain set(), which
overwrites whatever is there. Every delivery then claims the run, and the soak's checker must
see a run executed twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from exactly_once.ledger import store


def _create_without_precondition(
    self: store.FirestoreRunStore, run_id: str, fields: Mapping[str, Any], *, timeout: float
) -> datetime:
    result = self._document(run_id).set(dict(fields), retry=None, timeout=timeout)
    return result.update_time  # type: ignore[no-any-return]


store.FirestoreRunStore.create = _create_without_precondition  # type: ignore[method-assign]
