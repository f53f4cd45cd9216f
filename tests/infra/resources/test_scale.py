"""A stack of a thousand jobs: its per-job table ships in the function's source, so the
function's environment stays far under Cloud Run's 32 KiB; and a stack whose environment does
reach the limit is refused one byte past it, naming what overflowed and what to do about it."""

from __future__ import annotations

import pytest

from exactly_once.config import JOB_TABLE_ENV, JOB_TABLE_FILE
from infra.settings.environment import function_environment, function_secrets
from infra.settings.jobs import AUDIT_JOB_NAME
from policy.scheduler_guardrails.offline import resource_policy, run_resource_policy
from policy.scheduler_guardrails.policies import FUNCTION_V2
from policy.scheduler_guardrails.rules.environment_size import MAX_ENVIRONMENT_BYTES, environment_bytes
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tests.support.stack_tables import shipped_table, table_handlers
from tools.mocked_program import mock_stack
from tools.scale_stack import SCALE_HANDLER, scale_settings

PAD = "REPORT_PADDING"


def _padded(value_bytes: int) -> dict[str, object]:
    """A one-job stack whose job's `env` holds one variable of `value_bytes` bytes."""
    return valid_values(jobs=[valid_job(env={PAD: "x" * value_bytes})])


def _padding_to_the_limit() -> int:
    """The padding that makes the deployed environment exactly Cloud Run's limit."""
    settings = build(_padded(1))
    used = environment_bytes(function_environment(settings), function_secrets(settings))
    return MAX_ENVIRONMENT_BYTES - used + 1


def test_an_environment_of_exactly_32_kib_is_deployed_and_one_byte_more_is_refused() -> None:
    padding = _padding_to_the_limit()
    settings = build(_padded(padding))
    env = function_environment(settings)
    assert environment_bytes(env, function_secrets(settings)) == MAX_ENVIRONMENT_BYTES
    message = error_of(_padded(padding + 1))
    assert (
        f"{NAMESPACE}:jobs: the function's environment would be {MAX_ENVIRONMENT_BYTES + 1} bytes" in message
    )
    assert f"over Cloud Run's {MAX_ENVIRONMENT_BYTES}" in message
    assert f"the largest variable is {PAD} ({padding + 1} bytes)" in message
    # Advice for that kind of variable: a job's own `env` value.
    assert "a file in function/ ships with the source, and a secret counts only its name" in message


def test_the_pack_refuses_the_same_environment_by_the_same_check() -> None:
    padding = _padding_to_the_limit()
    env = function_environment(build(_padded(padding)))
    policy = resource_policy("function-environment-size")

    def props(variables: dict[str, str]) -> dict[str, object]:
        return {"name": "eos-function", "serviceConfig": {"environmentVariables": variables}}

    assert run_resource_policy(policy, FUNCTION_V2, props(env)) == []
    [message] = run_resource_policy(policy, FUNCTION_V2, props({**env, PAD: env[PAD] + "x"}))
    assert f"{MAX_ENVIRONMENT_BYTES + 1} bytes" in message and f"the largest variable is {PAD}" in message
    # A secret variable counts its name.
    with_secret = {**props(env), "serviceConfig": {"environmentVariables": env}}
    with_secret["serviceConfig"]["secretEnvironmentVariables"] = [  # type: ignore[index]
        {"key": "X", "secret": "s", "version": "latest", "projectId": "p"}
    ]
    [message] = run_resource_policy(policy, FUNCTION_V2, with_secret)
    assert "1 secrets' names" in message


@pytest.fixture(scope="module")
def thousand_jobs():
    return scale_settings(1000)


def test_a_thousand_hourly_jobs_pass_the_settings_checks_and_deploy_under_mocks(thousand_jobs) -> None:
    """Each job with a handler of its own: the handlers, and the audit's thousand entries, are
    in the shipped table; the environment holds only what is per deployment."""
    settings = thousand_jobs
    assert len(settings.jobs) == 1000
    stack = mock_stack(settings)
    function = next(
        r for r in stack.of_type("gcp:cloudfunctionsv2/function:Function") if r.name == "eos-function"
    )
    env = function.inputs["serviceConfig"]["environmentVariables"]
    assert env[JOB_TABLE_ENV] == JOB_TABLE_FILE
    assert environment_bytes(env) < MAX_ENVIRONMENT_BYTES
    assert len(stack.of_type("gcp:cloudscheduler/job:Job")) == 1001  # and the audit
    table = shipped_table(stack.resources)
    handlers = table_handlers(table)
    assert len(handlers) == 1001 and handlers[settings.scheduler_job_id("job-0999")] == SCALE_HANDLER
    assert table.audit is not None and len(table.audit["jobs"]) == 1001
    assert settings.scheduler_job_id(AUDIT_JOB_NAME) in handlers
