"""JSON object keys are strings: a value with any other key is refused, never stored changed.

json.dumps writes the key 1 as "1", so {1: "a", "1": "b"} would be stored as
{"1":"a","1":"b"} and read back as {"1": "b"}: one value silently lost. A checkpoint and an
output both go through the same encoder, so both refuse it before anything is stored.
"""

from __future__ import annotations

import json

import pytest

from exactly_once import RunContext, TerminalJobError, strict_json
from tests.support.instances import Instance
from tests.support.run_contexts import run_context


@pytest.mark.parametrize(
    "value",
    [{1: "a", "1": "b"}, {None: 1}, {"rows": [{"id": 1, 2.5: "x"}]}, {True: 1}],
    ids=["int-and-str", "none", "nested-float", "bool"],
)
def test_dumps_refuses_a_key_that_is_not_a_string(value):
    with pytest.raises(strict_json.StrictJsonError, match="is not a string"):
        strict_json.dumps(value)


def test_string_keys_round_trip_unchanged():
    value = {"1": "b", "nested": {"": [1, {"k": None}]}}
    assert strict_json.loads(strict_json.dumps(value)) == value


def test_a_checkpoint_with_a_non_string_key_is_terminal_and_keeps_the_earlier_one():
    context = run_context()
    context.checkpoint({"step": 1})
    with pytest.raises(TerminalJobError, match="object key 1 is not a string"):
        context.checkpoint({1: "a", "1": "b"})
    assert strict_json.loads(context.progress.latest() or "null") == {"step": 1}


def test_an_output_with_a_non_string_key_is_a_terminal_failure(emulator_host, project):
    def job(run: RunContext) -> object:
        return {1: "a", "1": "b"}

    instance = Instance(emulator_host, project, job)
    reply = instance.deliver()
    assert (reply.status, reply.body["outcome"]) == (200, "failed_terminal")
    line = json.loads(instance.logs.getvalue().splitlines()[-1])
    assert "object key 1 is not a string" in line["error"]
