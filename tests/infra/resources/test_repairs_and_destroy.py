"""What a failed build, a replacement and `pulumi destroy` do to the stack, as the resource
options recorded under mocks say: the functions are replaced delete-first, a function stored
without a URI fails the run with the repair named, and the field settings of a kept database
are kept with it, each with operation timeouts longer than the provider's 20 minutes."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pytest

from infra.plan.needs import needs_token_check
from infra.resources.function import FunctionNotServingError
from tests.infra.conftest import build, valid_values
from tests.support.optional import needs_proxy_kinds
from tools.mocked_program import GcpMocks, MockedStack, mock_stack

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
FIELD = "gcp:firestore/field:Field"
DATABASE = "gcp:firestore/database:Database"
PROVIDER_DEFAULT_MINUTES = 20
# Every sample: with the template's target kinds, both functions, the scheduled one and the
# token check a sample workflow brings, and the token records' field setting.
VALUES = valid_values(samples=True)
TOKEN_CHECK = needs_token_check(build(VALUES))
# Each function's resource name and the name it deploys under.
FUNCTIONS = {
    "eos-function": "eos-prod-handler",
    **({"eos-token-check": "eos-prod-token-check"} if TOKEN_CHECK else {}),
}


def stack_of(preview: bool = False, **values: Any) -> MockedStack:
    return mock_stack(build({**VALUES, **values}), preview=preview)


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_both_functions_are_replaced_delete_first(preview: bool) -> None:
    """Their names are fixed: a replacement that creates first meets 409 "already exists"."""
    functions = stack_of(preview).of_type(FUNCTION)
    assert sorted(f.name for f in functions) == sorted(FUNCTIONS)
    assert all(f.delete_before_replace for f in functions)
    # Their names do not change between runs: nothing else would make delete-first necessary.
    assert sorted(f.inputs["name"] for f in functions) == sorted(FUNCTIONS.values())


class FailedFunctionMocks(GcpMocks):
    """A deployed stack with a function whose build failed, as the state keeps it: FAILED, no
    URI, no service. Known values in a preview too: nothing changed, so the engine reads them
    from the state."""

    def __init__(self, project: str, failed: str, preview: bool) -> None:
        super().__init__(project, preview=preview, deployed=True)
        self.failed = failed

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        resource_id, outputs = super().new_resource(args)
        if args.typ == FUNCTION and args.inputs["name"] == self.failed:
            config = dict(args.inputs.get("serviceConfig", {}))
            config.update(uri="", service="")
            outputs.update(serviceConfig=config, url="", state="FAILED")
        return resource_id, outputs


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
@pytest.mark.parametrize(
    ("failed", "resource"),
    [
        ("eos-prod-handler", "eos-function"),
        # The token check, which only a sample of the target kinds brings.
        pytest.param("eos-prod-token-check", "eos-token-check", marks=needs_proxy_kinds),
    ],
)
def test_a_function_whose_build_failed_fails_the_run_naming_the_replace_that_repairs_it(
    preview: bool, failed: str, resource: str
) -> None:
    settings = build(VALUES)
    mocks = FailedFunctionMocks(settings.project, failed, preview)
    with pytest.raises(FunctionNotServingError) as raised:
        mock_stack(settings, mocks=mocks)
    message = str(raised.value)
    (urn,) = re.findall(r"pulumi up --replace '([^']+)'", message)
    assert urn.endswith(f"$gcp:cloudfunctionsv2/function:Function::{resource}")
    (registered,) = [r for r in mocks.registered if r[0] == FUNCTION and r[1] == resource]
    assert registered[2]["name"] == failed
    assert "docs/deploy.md" in message and "failed" in message


def test_a_first_preview_knows_no_uri_and_does_not_fail() -> None:
    """Unknown is not missing: a first preview of a new stack declares everything."""
    stack = stack_of(preview=True)
    assert len(stack.of_type(FUNCTION)) == len(FUNCTIONS)


def _minutes(duration: str) -> float:
    """A Pulumi custom timeout ("60m", "1h", "90s") in minutes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smh])", duration)
    assert match is not None, duration
    return float(match.group(1)) * {"s": 1 / 60, "m": 1, "h": 60}[match.group(2)]


@pytest.mark.parametrize(
    "values",
    [{}, {"databaseName": "shared-ledger", "createDatabase": False}],
    ids=["own-database", "existing-database"],
)
def test_with_deletion_protection_every_field_setting_is_kept_on_destroy(values: dict[str, Any]) -> None:
    """Deleting a field resource turns its TTL off and indexes the field again; the records
    of a kept database would then never expire."""
    stack = stack_of(deletionProtection=True, **values)
    fields = stack.of_type(FIELD)
    # The run records' TTL, their 4 indexing exemptions, and with the token check the token
    # records' TTL.
    assert len(fields) == (6 if TOKEN_CHECK else 5)
    assert [f.name for f in fields if not f.retain_on_delete] == []
    assert {f.inputs["collection"] for f in fields if "ttlConfig" in f.inputs} == {
        "scheduler_runs",
        *(["idempotency_tokens"] if TOKEN_CHECK else []),
    }
    databases = stack.of_type(DATABASE)
    assert all(d.inputs["deletionPolicy"] == "ABANDON" for d in databases)


def test_without_deletion_protection_destroy_deletes_the_field_settings_with_the_database() -> None:
    stack = stack_of(deletionProtection=False)
    (database,) = stack.of_type(DATABASE)
    assert database.inputs["deletionPolicy"] == "DELETE"
    assert [f.name for f in stack.of_type(FIELD) if f.retain_on_delete] == []


@pytest.mark.parametrize("protection", [True, False])
def test_every_field_operation_may_take_longer_than_the_providers_20_minutes(protection: bool) -> None:
    """Dev chains 6 field operations, one at a time; a TTL on a large collection is slow."""
    fields = stack_of(deletionProtection=protection).of_type(FIELD)
    assert fields
    for field in fields:
        assert set(field.custom_timeouts) == {"create", "update", "delete"}, field.name
        assert all(_minutes(value) > PROVIDER_DEFAULT_MINUTES for value in field.custom_timeouts.values())
