"""The one writer of the function's log lines: one JSON object per line on stdout.

Cloud Logging reads `severity` and `message` from such a line and keeps every other key as a
field of jsonPayload, where log-based metrics filter and group on them. The handler, the
token check and the proxy jobs all write through `emit`, so a field means the same thing
wherever it appears; the names a metric filters on are defined once, in log_fields.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from exactly_once.log_fields import MESSAGE, SEVERITY


def emit(severity: str, message: str, fields: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """Write one structured line. Values that are not JSON (datetimes) are written as text;
    a field never overrides severity or message."""
    line: dict[str, Any] = {SEVERITY: severity, MESSAGE: message}
    line.update((key, value) for key, value in fields.items() if key not in line)
    out = stream or sys.stdout
    out.write(json.dumps(line, default=str) + "\n")
    out.flush()


def severity_for_status(status: int) -> str:
    return "INFO" if status < 400 else "WARNING" if status < 500 else "ERROR"
