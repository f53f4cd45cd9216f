"""Cloud Run's limit on a function's environment, the one size check of it: the stack's
settings ask it of the environment they render, the policy pack of the one a function declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .targets.registry import TARGET_KINDS

# Cloud Run functions: all runtime environment variable names and values together.
MAX_ENVIRONMENT_BYTES: Final = 32 * 1024


def environment_bytes(env: Mapping[str, object], secret_names: Mapping[str, object] | None = None) -> int:
    """What Cloud Run counts against its limit: every variable's name and value in UTF-8, and
    the name of every secret variable (its value is fetched at start, not stored)."""
    size = sum(len(name.encode()) + len(str(value).encode()) for name, value in env.items())
    return size + sum(len(name.encode()) for name in secret_names or {})


def environment_size_problem(
    env: Mapping[str, object], secret_names: Mapping[str, object] | None = None
) -> str | None:
    """The one size check of a function's environment (the settings' checks, the program and
    the policy pack all ask it): None when it fits, else what overflowed and what to do about
    that kind of variable."""
    size = environment_bytes(env, secret_names)
    if size <= MAX_ENVIRONMENT_BYTES:
        return None
    largest = max(env, key=lambda name: len(str(env[name]).encode()), default="")
    largest_bytes = len(str(env.get(largest, "")).encode())
    if largest in _TABLE_ADVICE:
        advice = _TABLE_ADVICE[largest]
    else:
        advice = (
            "Move large values out of the environment: a file in function/ ships with the source, "
            "and a secret counts only its name."
        )
    return (
        f"the function's environment would be {size} bytes, over Cloud Run's {MAX_ENVIRONMENT_BYTES} "
        f"(names and values of {len(env)} variables and {len(secret_names or {})} secrets' names); "
        f"the largest variable is {largest} ({largest_bytes} bytes). {advice}"
    )


def _target_table_advice() -> dict[str, str]:
    """A target table's advice: its entries are the jobs' target specs, so what shrinks it is
    shorter specs (a long query belongs in a view or stored procedure) or fewer jobs a stack."""
    return {
        kind.environment_variable: (
            f"{kind.environment_variable} holds one entry per job with a {kind.key} target: keep long "
            "values (a query, arguments) in the target itself, e.g. a BigQuery view or stored procedure, "
            "or split the jobs over several stacks (docs/scale.md)."
        )
        for kind in TARGET_KINDS
        if kind.environment_variable is not None
    }


_TABLE_ADVICE: Final = _target_table_advice()
