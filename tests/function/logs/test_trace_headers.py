"""The request's trace from its headers: the valid forms read, every malformed one ignored."""

from __future__ import annotations

import pytest

from exactly_once.delivery.trace_headers import Trace, trace_of
from exactly_once.log_fields import SPAN_ID, TRACE, TRACE_SAMPLED

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def test_traceparent_gives_the_trace_the_span_and_the_sampled_flag() -> None:
    assert trace_of({"traceparent": f"00-{TRACE_ID}-{SPAN}-01"}) == Trace(TRACE_ID, SPAN, True)
    assert trace_of({"Traceparent": f"00-{TRACE_ID}-{SPAN}-00"}) == Trace(TRACE_ID, SPAN, False)


def test_a_later_version_may_carry_more_fields() -> None:
    assert trace_of({"traceparent": f"01-{TRACE_ID}-{SPAN}-03-extra"}) == Trace(TRACE_ID, SPAN, True)


def test_the_cloud_trace_header_is_read_when_traceparent_is_absent_or_invalid() -> None:
    cloud = {"X-Cloud-Trace-Context": f"{TRACE_ID.upper()}/17;o=1"}
    assert trace_of(cloud) == Trace(TRACE_ID, f"{17:016x}", True)
    assert trace_of({**cloud, "traceparent": "garbage"}) == Trace(TRACE_ID, f"{17:016x}", True)
    assert trace_of({"x-cloud-trace-context": TRACE_ID}) == Trace(TRACE_ID, None, False)
    assert trace_of({"x-cloud-trace-context": f"{TRACE_ID}/{2**64};o=1"}) == Trace(TRACE_ID, None, True)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00",
        f"00-{TRACE_ID}-{SPAN}",
        f"00-{TRACE_ID}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"ff-{TRACE_ID}-{SPAN}-01",
        f"00-{'0' * 32}-{SPAN}-01",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"00-{TRACE_ID.upper()}-{SPAN}-01",
        f"00-{TRACE_ID}-{SPAN}-0g",
        f"00-{TRACE_ID}x-{SPAN}-01",
        f'00-{TRACE_ID}-{SPAN}-01\n{{"severity": "CRITICAL"}}',
        f"00-{TRACE_ID}-{SPAN}-01-" + "a" * 10_000,
        "\u202e" * 40,
    ],
)
def test_a_malformed_or_hostile_header_is_ignored(value: str) -> None:
    assert trace_of({"traceparent": value}) is None
    assert trace_of({"X-Cloud-Trace-Context": value}) is None


def test_the_log_fields_name_the_project_and_need_one() -> None:
    trace = Trace(TRACE_ID, SPAN, True)
    assert trace.log_fields("my-project") == {
        TRACE: f"projects/my-project/traces/{TRACE_ID}",
        SPAN_ID: SPAN,
        TRACE_SAMPLED: True,
    }
    assert trace.log_fields(None) == {}
    assert Trace(TRACE_ID, None, False).log_fields("p") == {
        TRACE: f"projects/p/traces/{TRACE_ID}",
        TRACE_SAMPLED: False,
    }
