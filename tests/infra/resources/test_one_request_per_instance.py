"""The deduplicating function serves one request per instance: the watchdog and its backstop
end an attempt together with its process, which must take no other run with it. The shipped
stacks declare it so (under Pulumi mocks), and the policy pack refuses a fork that does not."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.resources.function import FUNCTION_ENTRY_POINT
from policy.scheduler_guardrails.offline import UNKNOWN_NUMBER, resource_policy, run_resource_policy
from tests.support.optional import needs_proxy_kinds
from tests.support.stacks import fixture_stack
from tools.mocked_program import MockedResource, as_policy_value, mock_stack

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
PROPERTY = "serviceConfig.maxInstanceRequestConcurrency"


def functions_of(stack: str) -> list[MockedResource]:
    return mock_stack(fixture_stack(stack)).of_type(FUNCTION)


def check(props: dict[str, Any]) -> list[str]:
    return run_resource_policy(resource_policy("one-request-per-instance"), FUNCTION, props, name="fork")


@pytest.fixture(scope="module")
def dev_functions() -> list[MockedResource]:
    return functions_of("dev")


def deduplicating(functions: list[MockedResource]) -> MockedResource:
    (function,) = [f for f in functions if f.inputs["buildConfig"]["entryPoint"] == FUNCTION_ENTRY_POINT]
    return function


def with_concurrency(function: MockedResource, concurrency: Any) -> dict[str, Any]:
    props: dict[str, Any] = copy.deepcopy(as_policy_value(function.inputs))
    if concurrency is None:
        del props["serviceConfig"]["maxInstanceRequestConcurrency"]
    else:
        props["serviceConfig"]["maxInstanceRequestConcurrency"] = concurrency
    return props


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_shipped_stacks_give_the_function_one_request_per_instance_and_pass(stack, dev_functions):
    functions = dev_functions if stack == "dev" else functions_of(stack)
    assert deduplicating(functions).inputs["serviceConfig"]["maxInstanceRequestConcurrency"] == 1
    for function in functions:  # the token check too, whatever its concurrency
        assert check(as_policy_value(function.inputs)) == []


@pytest.mark.parametrize("concurrency", [2, 80])
def test_more_requests_per_instance_are_refused_naming_the_property(dev_functions, concurrency):
    (message,) = check(with_concurrency(deduplicating(dev_functions), concurrency))
    assert f"{PROPERTY} is {concurrency}." in message and f"Set {PROPERTY} to 1" in message


def test_an_unset_concurrency_is_refused_and_an_unknown_one_waits_for_the_update(dev_functions):
    function = deduplicating(dev_functions)
    (message,) = check(with_concurrency(function, None))
    assert f"{PROPERTY} is not set" in message
    assert check(with_concurrency(function, UNKNOWN_NUMBER)) == []


# The token check is deployed for the samples of the target kinds that call it.
@needs_proxy_kinds
def test_the_token_check_ends_no_process_and_may_take_many_requests(dev_functions):
    (token_check,) = [f for f in dev_functions if f is not deduplicating(dev_functions)]
    assert token_check.inputs["buildConfig"]["entryPoint"] == "check_idempotency_token"
    assert check(with_concurrency(token_check, 80)) == []
