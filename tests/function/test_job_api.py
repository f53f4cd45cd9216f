from __future__ import annotations

from datetime import UTC, datetime

import pytest

from exactly_once import RunContext, TerminalJobError


def context(body: bytes) -> RunContext:
    return RunContext(
        run_id="r",
        job_name="nightly",
        schedule_time=datetime(2026, 10, 16, 12, tzinfo=UTC),
        project="acme",
        location="europe-west1",
        attempt_id="a",
        fence=1,
        body=body,
    )


@pytest.mark.parametrize(("body", "parsed"), [(b"", {}), (b"  ", {}), (b'{"a": 1}', {"a": 1})])
def test_json_body_parses_objects(body, parsed):
    assert context(body).json_body() == parsed


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "request body is not JSON"),
        (b"[1, 2]", "request body must be a JSON object"),
        (b"\xff\xfe", "request body is not JSON"),
    ],
)
def test_malformed_body_is_terminal(body, message):
    with pytest.raises(TerminalJobError, match=message):
        context(body).json_body()


def test_unknown_fields_are_terminal_and_named():
    allowed = {"workflow", "argument"}
    with pytest.raises(TerminalJobError, match=r"unknown body fields \['wokflow'\]; expected \['argument'"):
        context(b'{"wokflow": "x"}').json_body(allowed_fields=allowed)
    assert context(b'{"workflow": "x"}').json_body(allowed_fields=allowed) == {"workflow": "x"}
