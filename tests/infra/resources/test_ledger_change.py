"""A deployed stack keeps its run ledger: another `databaseName` or `runsCollection` is refused,
naming the key, both values and the ways to move, before the database or any field setting is
declared (the function would start on an empty ledger); and with `deletionProtection` Pulumi
itself refuses to delete or replace the database and the image repository (`protect`)."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra.settings.kept_settings import (
    DATABASE_OUTPUT,
    LEDGER_MOVED_FROM_KEY,
    REGION_OUTPUT,
    RUNS_COLLECTION_OUTPUT,
    check_unchanged,
)
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from tests.infra.conftest import REGION, build, error_of, valid_values
from tools.mocked_program import STACK_REFERENCE, GcpMocks, MockedStack, mock_stack

DATABASE = "gcp:firestore/database:Database"
REPOSITORY = "gcp:artifactregistry/repository:Repository"
DEPLOYED_DATABASE = (
    "eos-prod-ledger"  # the prod stack's own database (policy/scheduler_guardrails/rules/config/names.py)
)
DEPLOYED_COLLECTION = "scheduler_runs"
# What the last update of an unchanged stack recorded.
RECORDED = {
    REGION_OUTPUT: REGION,
    DATABASE_OUTPUT: DEPLOYED_DATABASE,
    RUNS_COLLECTION_OUTPUT: DEPLOYED_COLLECTION,
}
# Each ledger key, with another value for it.
CHANGES = {
    "databaseName": (DATABASE_OUTPUT, "other-ledger", DEPLOYED_DATABASE),
    "runsCollection": (RUNS_COLLECTION_OUTPUT, "other_runs", DEPLOYED_COLLECTION),
}


def settings_of(**values: Any) -> StackSettings:
    return build(valid_values(**values))


def run(
    settings: StackSettings, previous: dict[str, Any], preview: bool = False
) -> tuple[MockedStack, GcpMocks]:
    mocks = GcpMocks(settings.project, preview=preview, previous_outputs=previous)
    return mock_stack(settings, mocks=mocks), mocks


def assert_names_the_change_and_the_ways(message: str, key: str, changed: str, deployed: str) -> None:
    assert f"{key} is '{changed}'" in message
    assert f"'{deployed}' (its `{key}` output)" in message
    assert "empty run ledger" in message
    # The two ways to move: a second stack, or the records within retention copied over.
    assert "second stack" in message and "pulumi stack init" in message
    assert "within retention (`retentionSeconds`)" in message and LEDGER_MOVED_FROM_KEY in message
    assert f"set {key} back to '{deployed}'" in message


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_the_check_refuses_another_ledger_value_naming_the_key_both_values_and_the_ways(key: str) -> None:
    output, changed, deployed = CHANGES[key]
    with pytest.raises(SettingsError) as raised:
        check_unchanged(output, deployed, changed, "prod")
    assert_names_the_change_and_the_ways(str(raised.value), key, changed, deployed)


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_the_check_passes_a_first_deploy_an_unchanged_value_and_a_declared_move(key: str) -> None:
    output, changed, deployed = CHANGES[key]
    assert check_unchanged(output, None, changed, "prod") == changed
    assert check_unchanged(output, "", changed, "prod") == changed
    assert check_unchanged(output, deployed, deployed, "prod") == deployed
    assert check_unchanged(output, deployed, changed, "prod", moved_from=deployed) == changed
    with pytest.raises(SettingsError):
        check_unchanged(output, deployed, changed, "prod", moved_from="something-else")


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
@pytest.mark.parametrize("key", sorted(CHANGES))
def test_a_changed_ledger_key_fails_the_update_before_the_ledger_is_declared(key: str, preview: bool) -> None:
    """The engine reads the reference in a preview too, so a pull request's preview fails."""
    _, changed, deployed = CHANGES[key]
    settings = settings_of(**{key: changed})
    mocks = GcpMocks(settings.project, preview=preview, previous_outputs=RECORDED)
    with pytest.raises(pulumi.RunError) as raised:
        mock_stack(settings, mocks=mocks)
    assert_names_the_change_and_the_ways(str(raised.value), key, changed, deployed)
    types = {typ for typ, *_ in mocks.registered}
    assert STACK_REFERENCE in types
    # Neither a new database nor a field setting on another collection, nor the function.
    assert not [t for t in types if t.startswith(("gcp:firestore/", "gcp:cloudfunctionsv2/"))]


@pytest.mark.parametrize(
    "previous",
    [{}, RECORDED, {REGION_OUTPUT: REGION}],
    ids=["first-deploy", "unchanged", "recorded-before-the-ledger-outputs"],
)
def test_an_unchanged_ledger_or_a_first_deploy_deploys_and_records_it(previous: dict[str, Any]) -> None:
    stack, _ = run(settings_of(), previous)
    assert stack.one(DATABASE).inputs["name"] == DEPLOYED_DATABASE
    assert stack.component_outputs[DATABASE_OUTPUT] == DEPLOYED_DATABASE
    assert stack.component_outputs[RUNS_COLLECTION_OUTPUT] == DEPLOYED_COLLECTION


def test_a_declared_move_of_a_copied_ledger_deploys_the_new_place() -> None:
    settings = settings_of(
        databaseName="other-ledger",
        runsCollection="other_runs",
        ledgerMovedFrom=f"{DEPLOYED_DATABASE}/{DEPLOYED_COLLECTION}",
    )
    stack, _ = run(settings, RECORDED)
    assert stack.one(DATABASE).inputs["name"] == "other-ledger"
    assert stack.component_outputs[RUNS_COLLECTION_OUTPUT] == "other_runs"


@pytest.mark.parametrize("protection", [True, False], ids=["protected", "unprotected"])
def test_deletion_protection_protects_the_database_and_the_image_repository(protection: bool) -> None:
    """`protect` makes Pulumi refuse a plan that deletes or replaces them, before Google Cloud
    is asked: a replaced database is an empty ledger, a replaced repository meets 409."""
    stack, _ = run(settings_of(deletionProtection=protection), RECORDED)
    repositories = stack.of_type(REPOSITORY)
    assert repositories
    assert [r.protect for r in [stack.one(DATABASE), *repositories]] == [protection] * (1 + len(repositories))


@pytest.mark.parametrize("value", ["eos-prod-ledger", "/scheduler_runs", "eos-prod-ledger/"])
def test_a_move_not_written_as_database_slash_collection_is_a_config_error_naming_the_key(value: str) -> None:
    message = error_of({**valid_values(), LEDGER_MOVED_FROM_KEY: value})
    assert f"{LEDGER_MOVED_FROM_KEY}: {value!r} is not '<databaseName>/<runsCollection>'" in message
