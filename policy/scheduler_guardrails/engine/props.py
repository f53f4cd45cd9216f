"""Reading engine properties: every property a check reads goes through `lookup`.

`lookup` turns the engine's preview-time unknowns into a value a check skips. Letting
`UnknownValueError` escape would make the SDK skip the whole policy (for a stack policy: every
resource), so one unknown URI would hide a real violation. Properties arrive with the engine's
camelCase names (`httpTarget.oidcToken`), numbers as floats (protobuf) or strings (environment
variables), and durations as protobuf strings ("60s"): the readers here take each form.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)s\s*$")


class Absent(enum.Enum):
    """Why a property has no usable value: left out (the service default applies), or not
    known until the update runs (preview), in which case every check on it is skipped."""

    MISSING = "missing"
    UNKNOWN = "unknown"


MISSING: Final = Absent.MISSING
UNKNOWN: Final = Absent.UNKNOWN

_UNKNOWN_SENTINELS: Final = frozenset(
    {
        UNKNOWN_BOOLEAN_VALUE,
        UNKNOWN_NUMBER_VALUE,
        UNKNOWN_STRING_VALUE,
        UNKNOWN_ARRAY_VALUE,
        UNKNOWN_ASSET_VALUE,
        UNKNOWN_ARCHIVE_VALUE,
        UNKNOWN_OBJECT_VALUE,
    }
)


def is_unknown_sentinel(value: Any) -> bool:
    """True for the strings the engine sends in place of values it cannot know in preview."""
    return isinstance(value, str) and value in _UNKNOWN_SENTINELS


def lookup(props: Any, *path: str | int) -> Any:
    """The value at `path`, or MISSING (absent or null) or UNKNOWN (preview).

    Works on the SDK's unknown-checking proxies and on plain dicts alike.
    """
    value: Any = props
    for key in path:
        if value is UNKNOWN or is_unknown_sentinel(value):
            return UNKNOWN
        try:
            if isinstance(key, int):
                if not isinstance(value, Sequence) or isinstance(value, str):
                    return MISSING
                value = value[key]
            else:
                if not isinstance(value, Mapping):
                    return MISSING
                value = value[key]
        except (KeyError, IndexError):
            return MISSING
        except UnknownValueError:
            return UNKNOWN
    if value is None:
        return MISSING
    if is_unknown_sentinel(value):
        return UNKNOWN
    return value


def elements(props: Any, *path: str) -> list[Any] | Absent:
    """The items of a list property (each possibly UNKNOWN), or why there are none."""
    value = lookup(props, *path)
    if isinstance(value, Absent):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [value]
    return [lookup(value, index) for index in range(len(value))]


def is_blank(value: Any) -> bool:
    return value is MISSING or (isinstance(value, str) and not value.strip())


def parse_duration_seconds(value: Any) -> float | None:
    """Seconds in a protobuf duration string ("60s", "3.5s") or a bare number; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and (match := _DURATION.match(value)):
        return float(match[1])
    return None


def as_number(value: Any) -> float | None:
    """A number the engine may send as int, float (protobuf) or numeric string (env vars)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None
