"""A job's body against what the function accepts: the stack's settings refuse a body the
function would refuse on every delivery (over its size limit, or a number JSON cannot hold),
and the program under mocks, `make check` and the policy pack refuse exactly the same bodies."""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime import config as runtime_config

from exactly_once import strict_json
from exactly_once.delivery.handler import MAX_BODY_BYTES
from infra.config.paths import FUNCTION_DIR
from infra.settings.jobs import DEFAULT_RETRY, JobSettings
from policy.scheduler_guardrails.policies import SCHEDULER_JOB
from policy.scheduler_guardrails.rules.config.delivery_body import max_body_bytes
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.tests import fixtures
from policy.tests.crafted import check
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tests.support.optional import needs_proxy_kinds
from tools import mocked_program as pulumi_harness
from tools.mocked_program import run_main

# What JobSettings.body_bytes adds around one string field: {"blob":"..."}.
_FRAMING = len(b'{"blob":""}')


def blob(size: int) -> dict[str, str]:
    """A body whose bytes, as Cloud Scheduler sends them, are exactly `size` long."""
    return {"blob": "x" * (size - _FRAMING)}


def test_the_limit_is_the_functions_own() -> None:
    """Read from the function's source (the program cannot import the module that defines it):
    the number the deployed function compares a body with."""
    assert max_body_bytes(FUNCTION_DIR) == MAX_BODY_BYTES


def test_a_function_that_no_longer_defines_the_limit_is_an_error_not_a_guess(tmp_path: Path) -> None:
    handler = tmp_path / "exactly_once" / "delivery" / "handler.py"
    handler.parent.mkdir(parents=True)
    handler.write_text("MAX_BODY_BYTES = int('65536')\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="defines no MAX_BODY_BYTES as a whole number"):
        max_body_bytes(tmp_path)
    handler.write_text("MAX_BODY_BYTES = 1 << 10\n", encoding="utf-8")
    assert max_body_bytes(tmp_path) == 1024


@pytest.mark.parametrize("size", [70 * 1000, 2 * 1024 * 1024])
def test_a_body_over_the_limit_is_refused_naming_the_job_its_size_and_the_limit(size: int) -> None:
    message = error_of(valid_values(jobs=[valid_job(name="bulky", body=blob(size))]))
    assert "invalid config for stack 'prod'" in message
    assert (
        f"{NAMESPACE}:jobs[0].body: job 'bulky': the body Cloud Scheduler sends is {size:,} bytes, more "
        f"than the {MAX_BODY_BYTES:,} bytes the function accepts (MAX_BODY_BYTES): every delivery would "
        "be answered 413 body_too_large"
    ) in message


def test_a_body_of_exactly_the_limit_is_accepted() -> None:
    settings = build(valid_values(jobs=[valid_job(body=blob(MAX_BODY_BYTES))]))
    assert len(settings.scheduled_body(settings.jobs[0]) or b"") == MAX_BODY_BYTES
    assert "body_too_large" in error_of(valid_values(jobs=[valid_job(body=blob(MAX_BODY_BYTES + 1))]))


@pytest.mark.parametrize(
    ("number", "spelt"), [(math.nan, ".nan (NaN)"), (math.inf, ".inf (Infinity)"), (-math.inf, "-.inf")]
)
def test_a_number_json_cannot_hold_is_refused_naming_it_and_its_path(number: float, spelt: str) -> None:
    body = {"sleep_seconds": 1, "levels": {"list": [1, number]}}
    message = error_of(valid_values(jobs=[valid_job(name="nightly", body=body)]))
    assert f"{NAMESPACE}:jobs[0].body: job 'nightly': body.levels.list[1] is {spelt}" in message
    assert "JSON has no such number, so the function refuses the body" in message


def test_whatever_else_the_functions_strict_json_refuses_is_refused() -> None:
    """Its rules, not a copy: an integer beyond 64 bits, nesting deeper than it reads."""
    assert "outside the signed 64-bit range" in error_of(valid_values(jobs=[valid_job(body={"n": 2**64})]))
    deep: dict[str, Any] = {}
    for _ in range(strict_json.MAX_DEPTH):
        deep = {"d": deep}
    assert f"more than the {strict_json.MAX_DEPTH} allowed" in error_of(
        valid_values(jobs=[valid_job(body=deep)])
    )


def test_a_body_that_cannot_be_written_as_json_is_refused_not_a_crash() -> None:
    """YAML reads an unquoted date as a date; json.dumps cannot write one."""
    import datetime

    message = error_of(valid_values(jobs=[valid_job(body={"since": datetime.date(2027, 1, 1)})]))
    assert f"{NAMESPACE}:jobs[0].body: job 'every-5': the body cannot be written as JSON" in message


@needs_proxy_kinds
def test_a_sample_workflows_argument_is_held_to_the_limit_with_the_name_the_stack_gives_it() -> None:
    """The body names the sample workflow, known before it exists: the whole body is measured."""
    argument = {"blob": "x" * (MAX_BODY_BYTES - 100)}
    values = valid_values(
        jobs=[valid_job(), valid_job(name="wf", workflow={"sample": True, "argument": argument})]
    )
    message = error_of(values)
    assert f"{NAMESPACE}:jobs[1].workflow: job 'wf': the body Cloud Scheduler sends is " in message


def test_under_mocks_a_body_too_large_registers_no_resource(pulumi_config: dict[str, str]) -> None:
    pulumi_config[f"{NAMESPACE}:jobs"] = json.dumps([valid_job(body=blob(MAX_BODY_BYTES + 1))])
    mocks = pulumi_harness.GcpMocks("p-123")
    with pytest.raises(pulumi.RunError, match=rf"{NAMESPACE}:jobs\[0\]\.body: job 'every-5': .* bytes"):
        run_main(pulumi_config, mocks)
    assert mocks.registered == []
    runtime_config.set_all_config({})


def test_under_mocks_a_nan_body_registers_no_resource(pulumi_config: dict[str, str]) -> None:
    """`pulumi config` hands the program JSON, which Python's json module reads NaN from."""
    pulumi_config[f"{NAMESPACE}:jobs"] = json.dumps([valid_job(body={"sleep_seconds": math.nan})])
    mocks = pulumi_harness.GcpMocks("p-123")
    with pytest.raises(pulumi.RunError, match=r"body\.sleep_seconds is \.nan \(NaN\)"):
        run_main(pulumi_config, mocks)
    assert mocks.registered == []
    runtime_config.set_all_config({})


# --- the settings, the policy pack and the function agree -----------------------------------


def _function_refuses(body: bytes) -> bool:
    """What the function does with `body`: 413 over its limit, a terminal failure when a job
    reads a body that is not strict JSON."""
    if len(body) > MAX_BODY_BYTES:
        return True
    try:
        strict_json.loads(body)
    except strict_json.StrictJsonError:
        return True
    return False


def _pack_refuses(body: bytes) -> bool:
    job = fixtures.job()
    job["httpTarget"]["body"] = base64.b64encode(body).decode()
    return bool(check("scheduler-job-body-accepted", SCHEDULER_JOB, job))


def _settings_refuse(body: dict[str, Any]) -> bool:
    try:
        build(valid_values(jobs=[valid_job(body=body)]))
    except SettingsError:
        return True
    return False


@pytest.mark.parametrize(
    "body",
    [
        {"sleep_seconds": 1},
        blob(MAX_BODY_BYTES),
        blob(MAX_BODY_BYTES + 1),
        blob(2 * 1024 * 1024),
        {"sleep_seconds": math.nan},
        {"a": [math.inf]},
        {"n": 2**63},
        {"n": 2**63 - 1, "text": "é" * 100},
    ],
)
def test_settings_pack_and_function_refuse_the_same_bodies(body: dict[str, Any]) -> None:
    sent = JobSettings("j", "0 3 * * *", "Etc/UTC", 60.0, DEFAULT_RETRY, body=body).body_bytes()
    assert sent is not None
    refused = _function_refuses(sent)
    assert (_settings_refuse(body), _pack_refuses(sent)) == (refused, refused)
