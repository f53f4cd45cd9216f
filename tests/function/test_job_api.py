from __future__ import annotations

import pytest

from exactly_once import TerminalJobError
from tests.support.run_contexts import run_context


@pytest.mark.parametrize(("body", "parsed"), [(b"", {}), (b"  ", {}), (b'{"a": 1}', {"a": 1})])
def test_json_body_parses_objects(body, parsed):
    assert run_context(body).json_body() == parsed


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
        run_context(body).json_body()


def test_unknown_fields_are_terminal_and_named():
    allowed = {"workflow", "argument"}
    with pytest.raises(TerminalJobError, match=r"unknown body fields \['wokflow'\]; expected \['argument'"):
        run_context(b'{"wokflow": "x"}').json_body(allowed_fields=allowed)
    assert run_context(b'{"workflow": "x"}').json_body(allowed_fields=allowed) == {"workflow": "x"}
