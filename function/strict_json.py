"""JSON as the wire format means it: no NaN or Infinity, bounded nesting, bounded size.

Python's json module accepts `NaN` and `Infinity`, turns `1e400` into infinity, and recurses
once per nesting level, so a 100,000-deep body raises RecursionError, which nobody expects
from a parser. Everything the function reads from a request body or stores as a result goes
through here, so a hostile body is always a clear ValueError, never a crash or a retry loop.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Deeper than any sensible job parameter or result; far below Python's recursion limit.
MAX_DEPTH = 32


class StrictJsonError(ValueError):
    """The text is not JSON as RFC 8259 means it, or nests deeper than MAX_DEPTH."""


def nesting_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings, found without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJsonError(f"number {text[:40]} is too large")
    return value


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON; StrictJsonError names what is wrong."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise StrictJsonError("not UTF-8") from None
    if (depth := nesting_depth(text)) > max_depth:
        raise StrictJsonError(f"nested {depth} levels deep, more than the {max_depth} allowed")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except StrictJsonError:
        raise
    except (ValueError, RecursionError) as error:
        # JSONDecodeError, and int() refusing a number of over 4,300 digits.
        raise StrictJsonError(f"not JSON ({error})") from None


def dumps(value: Any) -> str:
    """Compact strict JSON; StrictJsonError for NaN, Infinity, cycles or non-JSON types."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, RecursionError) as error:
        raise StrictJsonError(f"not JSON-serialisable ({error})") from None
