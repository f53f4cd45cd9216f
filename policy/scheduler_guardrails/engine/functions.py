"""Which of a stack's functions is which: the token check, or a function that keeps run records.

The token check is built from the same source as the deduplicating function with another
entry point. It is no scheduler target, keeps no run records and ends no process, so the
rules about timing, the runs collection's TTL and instances must leave it out, and they tell
it the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from pulumi_policy import PolicyResource

from .props import lookup
from .types import FUNCTION_V2, resources_of

# The token check's entry point in function/main.py.
TOKEN_CHECK_ENTRY_POINT: Final = "check_idempotency_token"


def is_token_check(props: Any) -> bool:
    """Whether a Cloud Functions v2 function's properties are the token check's."""
    return bool(lookup(props, "buildConfig", "entryPoint") == TOKEN_CHECK_ENTRY_POINT)


def ledger_functions(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    """Cloud Functions v2 that may be scheduler targets and keep run records."""
    return [f for f in resources_of(resources, FUNCTION_V2) if not is_token_check(f.props)]
