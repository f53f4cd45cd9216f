"""How Firestore applies one Write protobuf to a document, for the in-memory store
(memory_store.py): preconditions, field masks, transforms, the values it refuses, commit times.
The client library turns each write into the protobuf Firestore receives (`as_written`, with the
library's own code); the rest is the server's half, as the emulator shows it.

What Firestore (as the emulator shows) does that one might not guess, and so does this store:

- A delete conditioned on an update_time is refused when the document does not exist, as a
  conditional update is: FAILED_PRECONDITION, "the stored version (0) does not match the
  required base version (...)" (versions are microseconds since the epoch). Either way the
  store raises StaleWrite; a conditional delete never succeeds on nothing.
- SERVER_TIMESTAMP is not the commit time. It is when the server took the request, to the
  millisecond: never after the write's update_time (on the emulator a few milliseconds before
  it), never before the previous commit's time cut to the millisecond, and the same for every
  field of one commit. This store writes the commit time cut to the millisecond.
- A write that leaves a document exactly as it was (same values, same types: 1 and 1.0
  differ) keeps the document's update_time, and that earlier time is the write's result.
  Commit times increase strictly only over writes that change something.
- A commit is refused for its first refused write, in the order sent: the record's own
  precondition (FAILED_PRECONDITION), a create of a document that exists (ALREADY_EXISTS,
  "entity already exists: ..." naming the document), an update of one that does not
  (NOT_FOUND), a value nested more than 20 maps or arrays deep or a field named like
  __name__ (INVALID_ARGUMENT). Nothing of a refused commit is applied.
- Writes of one commit apply in order, each to what the one before left: a document created
  and then updated in one commit holds both; deleted and then created, it is a new document.
- Increment adds int to int as an int (saturating at 64 bits) and anything with a double as
  a double; on a missing or non-numeric field (a bool included) it writes the operand.
  Maximum and Minimum keep the stored value when equal. ArrayUnion and ArrayRemove start
  from an empty array when the field holds none. A write through a field that holds no map
  replaces it with one; a DELETE_FIELD through one does nothing.

Not modelled: the limits on a document's size and a commit's writes, reference values, and
the emulator's refusal (INVALID_ARGUMENT) of an update after a delete of the same document
in one commit.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from google.api_core import exceptions as google_exceptions
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.field_path import parse_field_path

from exactly_once.ledger.writes import StagedWrite, WriteKind

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND = timedelta(microseconds=1)
# Firestore refuses a value with more maps and arrays nested in it than this.
MAX_NESTING = 20
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Pending:
    """A document as the writes of one commit have left it so far."""

    fields: dict[str, Any] | None
    version: int  # what an update_time precondition is compared with: 0 for no document
    created: bool = False  # made in this commit, so a new create_time


def apply_write(
    pending: Pending, path: str, write: Any, request_time: datetime, commit_version: int
) -> Pending:
    """One Write protobuf applied to `pending` as the server applies it, or its refusal."""
    _check_precondition(pending, path, write)
    if write.WhichOneof("operation") == "delete":
        return Pending(None, 0)
    given = cast(dict[str, Any], _helpers.decode_dict(write.update.fields, None))
    if write.HasField("update_mask"):
        fields = copy.deepcopy(pending.fields) if pending.fields is not None else {}
        for api_path in write.update_mask.field_paths:
            parts = parse_field_path(api_path)
            found, value = _lookup(given, parts)
            if found:
                _put(fields, parts, value)
            else:
                _remove(fields, parts)
    else:
        fields = given
    for transform in write.update_transforms:
        _transform(fields, parse_field_path(transform.field_path), transform, request_time)
    _validate(fields)
    if pending.fields is None:
        return Pending(fields, commit_version, created=True)
    return Pending(fields, pending.version, created=pending.created)


def _check_precondition(pending: Pending, path: str, write: Any) -> None:
    if not write.HasField("current_document"):
        return
    condition = write.current_document
    if condition.WhichOneof("condition_type") == "exists":
        if condition.exists and pending.fields is None:
            raise google_exceptions.NotFound(f"no entity to update: {path}")  # type: ignore[no-untyped-call]
        if not condition.exists and pending.fields is not None:
            raise google_exceptions.AlreadyExists(f"entity already exists: {path}")  # type: ignore[no-untyped-call]
        return
    required = condition.update_time.seconds * 1_000_000 + condition.update_time.nanos // 1000
    stored = pending.version if pending.fields is not None else 0
    if stored != required:
        message = f"the stored version ({stored}) does not match the required base version ({required})"
        raise google_exceptions.FailedPrecondition(message)  # type: ignore[no-untyped-call]


def _transform(fields: dict[str, Any], parts: list[str], transform: Any, request_time: datetime) -> None:
    kind = transform.WhichOneof("transform_type")
    found, current = _lookup(fields, parts)
    if kind == "set_to_server_value":
        value: Any = request_time
    elif kind == "increment":
        operand = _helpers.decode_value(transform.increment, None)
        if not (found and _is_number(current)):
            value = operand
        elif isinstance(current, int) and isinstance(operand, int):
            value = min(max(current + operand, _INT64_MIN), _INT64_MAX)
        else:
            value = float(current) + float(cast(float, operand))
    elif kind in ("maximum", "minimum"):
        operand = _helpers.decode_value(getattr(transform, kind), None)
        if not (found and _is_number(current)):
            value = operand
        elif kind == "maximum":
            value = operand if operand > current else current
        else:
            value = operand if operand < current else current
    elif kind == "append_missing_elements":
        value = list(current) if found and isinstance(current, list) else []
        for element in _elements(transform.append_missing_elements):
            if not any(canonical(element) == canonical(held) for held in value):
                value.append(element)
    elif kind == "remove_all_from_array":
        removed = [canonical(element) for element in _elements(transform.remove_all_from_array)]
        held = current if found and isinstance(current, list) else []
        value = [element for element in held if canonical(element) not in removed]
    else:
        raise google_exceptions.InvalidArgument(f"unknown field transform {kind}")  # type: ignore[no-untyped-call]
    _put(fields, parts, value)


def _elements(array: Any) -> list[Any]:
    """The values of an ArrayValue protobuf."""
    return [_helpers.decode_value(element, None) for element in array.values]


def _validate(fields: Mapping[str, Any]) -> None:
    for name, value in fields.items():
        if _reserved(name):
            raise google_exceptions.InvalidArgument(f"field name {name} is reserved")  # type: ignore[no-untyped-call]
        if _nesting(value) > MAX_NESTING:
            message = f"Property {name} contains an invalid nested entity."
            raise google_exceptions.InvalidArgument(message)  # type: ignore[no-untyped-call]
        _validate_names(value)


def _validate_names(value: Any) -> None:
    if isinstance(value, dict):
        for name, inner in value.items():
            if _reserved(name):
                raise google_exceptions.InvalidArgument(f"field name '{name}' is reserved.")  # type: ignore[no-untyped-call]
            _validate_names(inner)
    elif isinstance(value, list):
        for inner in value:
            _validate_names(inner)


def _reserved(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _nesting(value: Any) -> int:
    """Maps and arrays nested in `value`, itself included."""
    if isinstance(value, dict):
        return 1 + max((_nesting(inner) for inner in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_nesting(inner) for inner in value), default=0)
    return 0


def _lookup(fields: Mapping[str, Any], parts: Sequence[str]) -> tuple[bool, Any]:
    value: Any = fields
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _put(fields: dict[str, Any], parts: Sequence[str], value: Any) -> None:
    """Set the field at `parts`; a map is made of whatever lies on the way."""
    for part in parts[:-1]:
        inner = fields.get(part)
        if not isinstance(inner, dict):
            inner = fields[part] = {}
        fields = inner
    fields[parts[-1]] = value


def _remove(fields: dict[str, Any], parts: Sequence[str]) -> None:
    """Remove the field at `parts`; nothing when a map on the way is missing."""
    for part in parts[:-1]:
        inner = fields.get(part)
        if not isinstance(inner, dict):
            return
        fields = inner
    fields.pop(parts[-1], None)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def canonical(value: Any, *, exact: bool = False) -> Any:
    """A value as Firestore compares it: numbers by value (1 == 1.0), anything else by type
    and value; `exact` tells numbers' types apart too, as "did this write change anything"
    does."""
    if isinstance(value, dict):
        return ("map", tuple(sorted((key, canonical(inner, exact=exact)) for key, inner in value.items())))
    if isinstance(value, list):
        return ("array", tuple(canonical(inner, exact=exact) for inner in value))
    if _is_number(value) and not exact:
        return ("number", value)
    return (type(value).__name__, value)


def version_of(moment: datetime) -> int:
    """A commit time as Firestore's document version: microseconds since the epoch."""
    return (moment - _EPOCH) // _ONE_MICROSECOND


def firestore_time(moment: datetime) -> datetime:
    """`moment` as Firestore hands times back (DatetimeWithNanoseconds, UTC)."""
    return cast(datetime, _helpers.decode_value(_helpers.encode_value(moment), None))


def as_written(writes: Sequence[StagedWrite]) -> list[tuple[str, Any]]:
    """(path, Write protobuf) for each write, as writes.add_to_batch puts them in a batch."""
    staged: list[tuple[str, Any]] = []
    for write in writes:
        path = write.document.path
        data = dict(write.data)
        if write.kind is WriteKind.CREATE:
            pbs = _helpers.pbs_for_create(path, data)
        elif write.kind is WriteKind.SET and write.merge:
            pbs = _helpers.pbs_for_set_with_merge(path, data, True)
        elif write.kind is WriteKind.SET:
            pbs = _helpers.pbs_for_set_no_merge(path, data)
        elif write.kind is WriteKind.UPDATE:
            pbs = _helpers.pbs_for_update(path, data, write.option)
        else:
            pbs = [_helpers.pb_for_delete(path, write.option)]
        staged.extend((path, pb) for pb in pbs)
    return staged


def only_write(pbs: Sequence[Any]) -> Any:
    """The one Write protobuf the client library makes of a create, set or update."""
    (pb,) = pbs
    return pb
