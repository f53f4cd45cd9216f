"""JSON as the wire format means it: no NaN or Infinity, bounded numbers, bounded nesting.

Python's json module accepts `NaN` and `Infinity`, turns `1e400` into infinity, reads an
integer of 400 digits that float() and math.isfinite() then refuse with OverflowError, and
recurses once per nesting level, so a 100,000-deep body raises RecursionError, which nobody
expects from a parser. Everything the function reads from a request body or stores as a result goes through
here, so a hostile body is always a clear ValueError, never a crash or a retry loop.

Integers are those Firestore and Workflows store: signed 64-bit. A larger one is refused on
the way in and on the way out, and so is an object key that is not a string (json.dumps would
write it as one, and two keys could collide), so whatever dumps() writes, loads() reads back
as it was.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Deeper than any sensible job parameter or result; far below Python's recursion limit.
MAX_DEPTH = 32
# Firestore's integers (and Workflows' int) are signed 64-bit.
MIN_INTEGER = -(2**63)
MAX_INTEGER = 2**63 - 1
# A number is named in an error by its first characters and its length, never in full.
_SHOWN_CHARACTERS = 24


class StrictJsonError(ValueError):
    """The text is not JSON as RFC 8259 means it, holds an integer outside int64, or nests
    deeper than MAX_DEPTH."""


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


def _shown(number: str) -> str:
    if len(number) <= _SHOWN_CHARACTERS:
        return number
    return f"{number[:_SHOWN_CHARACTERS]}... ({len(number)} characters)"


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJsonError(f"number {_shown(text)} is too large")
    return value


def _int64(text: str) -> int:
    # 20 characters hold every int64 with its sign: a longer literal is refused unconverted.
    if len(text) > 20 or not MIN_INTEGER <= (value := int(text)) <= MAX_INTEGER:
        raise StrictJsonError(f"integer {_shown(text)} is outside the signed 64-bit range")
    return value


def _unstorable(value: Any) -> str | None:
    """What in a value json.dumps accepted (so it is acyclic and shallow enough) JSON would
    not keep as it is, found without recursion: an integer outside int64, or an object key that
    is not a string. json.dumps writes the key 1 as "1", so {1: "a", "1": "b"} would come back
    as {"1": "b"}: a value silently lost."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    return f"object key {_shown(repr(key))} is not a string (JSON keys are strings)"
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool) and not MIN_INTEGER <= item <= MAX_INTEGER:
            return f"integer {_shown(str(item))} is outside the signed 64-bit range"
    return None


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON; StrictJsonError names what is wrong."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise StrictJsonError("not UTF-8") from None
    if (depth := nesting_depth(text)) > max_depth:
        raise StrictJsonError(f"nested {depth} levels deep, more than the {max_depth} allowed")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_int64)
    except StrictJsonError:
        raise
    except (ValueError, RecursionError) as error:
        raise StrictJsonError(f"not JSON ({error})") from None


def dumps(value: Any) -> str:
    """Compact strict JSON; StrictJsonError for NaN, Infinity, integers outside int64,
    object keys that are not strings, cycles or non-JSON types."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, RecursionError) as error:
        raise StrictJsonError(f"not JSON-serialisable ({error})") from None
    if (problem := _unstorable(value)) is not None:
        raise StrictJsonError(problem)
    return text
