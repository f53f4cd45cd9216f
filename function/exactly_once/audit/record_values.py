"""A record's fields from Firestore's own protobuf `Value`s, as the client library's
`DocumentSnapshot.to_dict()` gives them, for the audit's reads of tens of thousands of records.

The library builds a snapshot per document, decodes every field through proto-plus wrappers,
and `to_dict()` then deep-copies the whole record again: most of the CPU an audit spends per run.
Run records hold only the kinds below (the ledger writes nothing else), so decoding them
straight from the protobuf is a few attribute reads per field. A value of any other kind (a
reference, a geo point) is not a run record's: it is refused by name, never guessed at.
tests/function/audit/test_record_values.py checks on the emulator that every kind decodes to
exactly what `to_dict()` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, Protocol, cast

from google.api_core.datetime_helpers import DatetimeWithNanoseconds

# Each kind (the `value_type` oneof of google.firestore.v1.Value) a run record's field may
# hold, and its Python value; maps and arrays recurse.
_SCALARS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "null_value": lambda value: None,
    "boolean_value": lambda value: value.boolean_value,
    "integer_value": lambda value: value.integer_value,
    "double_value": lambda value: value.double_value,
    "string_value": lambda value: value.string_value,
    "bytes_value": lambda value: value.bytes_value,
    "timestamp_value": lambda value: timestamp(value.timestamp_value),
}


class Stamp(Protocol):
    """A protobuf Timestamp (google.protobuf.Timestamp), as far as it is read here."""

    seconds: int
    nanos: int


class RecordValueError(ValueError):
    """A field holds a kind of value no run record holds."""


def decoded_fields(fields: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """`fields` (a protobuf map of field name to `Value`) as Python values; `path` names the
    enclosing map in an error."""
    return {name: decoded(value, f"{path}{name}") for name, value in fields.items()}


def decoded(value: Any, path: str) -> Any:
    """One `Value` as the client library decodes it; `path` names the field in an error."""
    kind = value.WhichOneof("value_type")
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        return scalar(value)
    if kind == "map_value":
        return decoded_fields(value.map_value.fields, f"{path}.")
    if kind == "array_value":
        return [decoded(item, f"{path}[{index}]") for index, item in enumerate(value.array_value.values)]
    raise RecordValueError(
        f"field {path!r} holds a {kind or 'value of no kind'}, which no run record holds: "
        f"the audit reads {', '.join(sorted((*_SCALARS, 'map_value', 'array_value')))}"
    )


def timestamp(stamp: Stamp) -> datetime:
    """A protobuf Timestamp as the client library gives it: UTC, to the nanosecond (a
    DatetimeWithNanoseconds)."""
    return cast(datetime, DatetimeWithNanoseconds.from_timestamp_pb(stamp))  # type: ignore[no-untyped-call]


class Timestamps:
    """timestamp(), but the last instant decoded is not decoded again (datetimes are immutable):
    the responses of a batched get share one read time, and a record written once has one
    commit time for its creation and its update."""

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None
        self._value: datetime | None = None

    def of(self, stamp: Stamp) -> datetime:
        key = (stamp.seconds, stamp.nanos)
        if key != self._last or self._value is None:
            self._last, self._value = key, timestamp(stamp)
        return self._value
