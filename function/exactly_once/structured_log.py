"""The one writer of the function's log lines: one JSON object per line on stdout.

Cloud Logging reads `severity` and `message` from such a line and keeps every other key as a
field of jsonPayload, where log-based metrics filter and group on them. The handler, the
token check and the proxy jobs all write through `emit`, so a field means the same thing
wherever it appears; the names a metric filters on are defined once, in log_fields.py.

While a delivery is being answered, its fields for every line (the request's trace, the
labels naming the run and the job) are held in a context of that delivery (`delivery_fields`),
so each line written on its thread carries them, the job's own lines included (job_logging.py),
without being passed down: concurrent deliveries on one instance each see their own.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TextIO, cast

from exactly_once.log_fields import MESSAGE, SEVERITY

_NO_DELIVERY: Mapping[str, Any] = MappingProxyType({})
_DELIVERY_FIELDS: ContextVar[Mapping[str, Any]] = ContextVar("delivery_fields", default=_NO_DELIVERY)


def emit(severity: str, message: str, fields: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """Write one structured line. Values that are not JSON (datetimes) are written as text;
    a field never overrides severity or message, nor a delivery's field one given here."""
    line: dict[str, Any] = {SEVERITY: severity, MESSAGE: message}
    line.update((key, value) for key, value in fields.items() if key not in line)
    line.update((key, value) for key, value in _DELIVERY_FIELDS.get().items() if key not in line)
    out = stream or sys.stdout
    out.write(json.dumps(line, default=str) + "\n")
    out.flush()


@contextlib.contextmanager
def delivery_fields() -> Iterator[dict[str, Any]]:
    """A delivery's fields for every line written in this context; the caller fills the dict
    as it learns them (the trace first, the run once the headers are read)."""
    fields: dict[str, Any] = {}
    token = _DELIVERY_FIELDS.set(fields)
    try:
        yield fields
    finally:
        _DELIVERY_FIELDS.reset(token)


def set_delivery_field(name: str, value: Any) -> None:
    """Add a field to every later line of the delivery this thread is answering (none: nothing)."""
    fields = _DELIVERY_FIELDS.get()
    if fields is not _NO_DELIVERY:
        cast(dict[str, Any], fields)[name] = value


def in_delivery() -> bool:
    """Whether this thread is answering a delivery now."""
    return _DELIVERY_FIELDS.get() is not _NO_DELIVERY


def severity_for_status(status: int) -> str:
    return "INFO" if status < 400 else "WARNING" if status < 500 else "ERROR"
