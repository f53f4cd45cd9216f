"""A record's fields from Firestore's own protobuf `Value`s, as the client library's
`DocumentSnapshot.to_dict()` gives them, for the audit's reads of tens of thousands of records.

The library builds a snapshot per document, decodes every field through proto-plus wrappers,
and `to_dict()` then deep-copies the whole record again: most of the CPU an audit spends per run.
Run records hold only the kinds below (the ledger writes nothing else), so decoding them
straight from the protobuf is a few attribute reads per field. A value of any other kind (a
reference, a geo point) is not a run record's: it is refused by name, never guessed at.
tests/function/audit/test_record_values.py checks on the emulator that every kind decodes to
what `to_dict()` gives, of the same type but for timestamps: a UTC datetime, the same instant
as the library's DatetimeWithNanoseconds (`timestamp`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

# The kinds (the `value_type` oneof of google.firestore.v1.Value) whose Python value is the
# protobuf field itself.
_PLAIN: Final = frozenset({"boolean_value", "integer_value", "double_value", "string_value", "bytes_value"})
# Every kind a run record's field may hold.
KINDS: Final = (*sorted(_PLAIN), "null_value", "timestamp_value", "map_value", "array_value")


class Stamp(Protocol):
    """A protobuf Timestamp (google.protobuf.Timestamp), as far as it is read here."""

    seconds: int
    nanos: int


class RecordValueError(ValueError):
    """A field holds a kind of value no run record holds."""


class _OtherKind(Exception):
    """A value of a kind not in KINDS, and where it sits, named as the error unwinds."""

    def __init__(self, kind: str | None) -> None:
        super().__init__(kind)
        self.kind = kind or "value of no kind"
        self.path = ""


def decoded_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` (a protobuf map of field name to `Value`) as Python values. Raises
    RecordValueError naming the field of a kind no run record holds."""
    try:
        return _map(fields)
    except _OtherKind as other:
        raise RecordValueError(
            f"field {other.path.removeprefix('.')!r} holds a {other.kind}, which no run record holds: "
            f"the audit reads {', '.join(KINDS)}"
        ) from None


def _map(fields: Mapping[str, Any]) -> dict[str, Any]:
    found = {}
    for name in fields:
        try:
            found[name] = _decoded(fields[name])
        except _OtherKind as other:
            other.path = f".{name}{other.path}"
            raise
    return found


def _decoded(value: Any) -> Any:
    """One `Value` as the client library decodes it."""
    kind = value.WhichOneof("value_type")
    if kind in _PLAIN:
        return getattr(value, kind)
    if kind == "null_value":
        return None
    if kind == "timestamp_value":
        return timestamp(value.timestamp_value)
    if kind == "map_value":
        return _map(value.map_value.fields)
    if kind == "array_value":
        items = []
        for index, item in enumerate(value.array_value.values):
            try:
                items.append(_decoded(item))
            except _OtherKind as other:
                other.path = f"[{index}]{other.path}"
                raise
        return items
    raise _OtherKind(kind)


def timestamp(stamp: Stamp) -> datetime:
    """A protobuf Timestamp as a UTC datetime, to the microsecond: the instant the client library
    gives, not its DatetimeWithNanoseconds subclass, whose construction took three times as
    long (the audit decodes three or four a record). Firestore keeps no finer time than the
    microsecond, for a value or a commit."""
    return _EPOCH + timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


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
