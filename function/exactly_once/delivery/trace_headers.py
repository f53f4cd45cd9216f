"""The request's trace, so that Cloud Logging shows a delivery's lines under its request.

Cloud Run forwards every request's trace context in `traceparent` (W3C Trace Context) and in
`X-Cloud-Trace-Context` (Google's older form, `TRACE_ID/SPAN_ID;o=1`, the span id decimal).
A line whose `logging.googleapis.com/trace` is `projects/<project>/traces/<trace id>` is grouped
under that request in Logs Explorer, and `spanId` ties it to the span.

The headers come from whoever calls the function: a malformed, oversized or hostile value is
ignored (the lines carry no trace), never an error, and nothing but the validated hex ids is
ever copied into a line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from exactly_once.delivery.request_checks import header_value
from exactly_once.log_fields import SPAN_ID, TRACE, TRACE_SAMPLED

TRACEPARENT_HEADER: Final = "traceparent"
CLOUD_TRACE_HEADER: Final = "X-Cloud-Trace-Context"

# version-traceid-parentid-flags, lowercase hex; a later version may append fields after a "-".
_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?")
_CLOUD_TRACE: Final = re.compile(r"([0-9a-fA-F]{32})(?:/([0-9]{1,20}))?(?:;o=([0-9]+))?")
_SAMPLED_FLAG: Final = 0x01
_MAX_SPAN_ID: Final = 2**64 - 1


@dataclass(frozen=True)
class Trace:
    trace_id: str  # 32 lowercase hex digits, never all zeros
    span_id: str | None  # 16 lowercase hex digits, never all zeros
    sampled: bool

    def log_fields(self, project: str | None) -> dict[str, Any]:
        """The fields Cloud Logging reads from a line's top level. Without a project (a run
        outside Google Cloud) there is no trace resource to name, so no trace field."""
        if not project:
            return {}
        fields: dict[str, Any] = {
            TRACE: f"projects/{project}/traces/{self.trace_id}",
            TRACE_SAMPLED: self.sampled,
        }
        if self.span_id is not None:
            fields[SPAN_ID] = self.span_id
        return fields


def trace_of(headers: Mapping[str, str]) -> Trace | None:
    """The request's trace: from `traceparent` when it is valid, else from
    `X-Cloud-Trace-Context`, else None."""
    return _from_traceparent(header_value(headers, TRACEPARENT_HEADER)) or _from_cloud_trace(
        header_value(headers, CLOUD_TRACE_HEADER)
    )


def _from_traceparent(value: str | None) -> Trace | None:
    found = _TRACEPARENT.fullmatch(value.strip()) if value is not None and len(value) <= 512 else None
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    # Version ff is forbidden, and version 00 has exactly four fields.
    if version == "ff" or (version == "00" and rest) or _zero(trace_id) or _zero(span_id):
        return None
    return Trace(trace_id, span_id, bool(int(flags, 16) & _SAMPLED_FLAG))


def _from_cloud_trace(value: str | None) -> Trace | None:
    found = _CLOUD_TRACE.fullmatch(value.strip()) if value is not None and len(value) <= 128 else None
    if found is None or _zero(found[1]):
        return None
    span = int(found[2]) if found[2] is not None else 0
    span_id = f"{span:016x}" if 0 < span <= _MAX_SPAN_ID else None
    return Trace(found[1].lower(), span_id, found[3] == "1")


def _zero(hex_digits: str) -> bool:
    return set(hex_digits) == {"0"}
