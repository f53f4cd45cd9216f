"""A deployed stack keeps its region: another `gcp:region` is refused, naming both, before any
regional resource is declared; the region is read from the stack's own last outputs."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra.config.schema import project_name
from infra.settings.kept_settings import REGION_OUTPUT, check_unchanged
from infra.settings.loading import settings_from_config
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KEYS
from tests.infra.conftest import NAMESPACE, PROJECT, REGION, valid_job, valid_values
from tools.mocked_program import (
    SLEEP,
    STACK_REFERENCE,
    GcpMocks,
    MockedStack,
    mock_stack,
)

OTHER_REGION = "us-central1"
API_PAUSE = "eos-api-propagation"
# Each target kind's sample, with the regional resources it deploys, for the kinds present: so
# every kind of regional resource the checkout can deploy is declared (a sample Cloud Run job
# among them, which `samples: true` leaves out).
KIND_SAMPLES = {
    "workflow": (valid_job(name="wf", workflow={"sample": True}), "gcp:workflows/workflow:Workflow"),
    "cloudRunJob": (valid_job(name="crj", cloudRunJob={"sample": True}), "gcp:cloudrunv2/job:Job"),
    "bigquery": (valid_job(name="bq", bigquery={"sample": True}), "gcp:bigquery/dataset:Dataset"),
}
PRESENT = {key: sample for key, sample in KIND_SAMPLES.items() if key in TARGET_KEYS}
JOBS = [valid_job(), *(job for job, _ in PRESENT.values())]
# The inputs that place a resource in a region.
LOCATION_KEYS = ("location", "locationId", "region")


def settings_of(region: str = REGION) -> StackSettings:
    return settings_from_config(
        valid_values(jobs=JOBS), project=PROJECT, region=region, stack="prod", namespace=NAMESPACE
    )


def regional(inputs: dict[str, Any]) -> bool:
    return any(key in inputs for key in LOCATION_KEYS)


def test_the_check_passes_a_first_deploy_and_the_same_region() -> None:
    assert check_unchanged(REGION_OUTPUT, None, REGION, "prod") == REGION
    assert check_unchanged(REGION_OUTPUT, "", REGION, "prod") == REGION
    assert check_unchanged(REGION_OUTPUT, REGION, REGION, "prod") == REGION


def test_the_check_refuses_another_region_naming_both_and_the_way_out() -> None:
    with pytest.raises(SettingsError) as raised:
        check_unchanged(REGION_OUTPUT, REGION, OTHER_REGION, "prod")
    message = str(raised.value)
    assert f"gcp:region is '{OTHER_REGION}'" in message
    assert f"stack 'prod' is deployed in '{REGION}'" in message
    assert "pulumi stack init" in message and "pulumi destroy" in message
    assert f"set gcp:region back to '{REGION}'" in message


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_a_changed_region_is_refused_before_any_regional_resource_is_declared(preview: bool) -> None:
    """The engine reads the reference in a preview too, so a pull request's preview fails."""
    settings = settings_of(OTHER_REGION)
    mocks = GcpMocks(settings.project, preview=preview, previous_outputs={REGION_OUTPUT: REGION})
    with pytest.raises(pulumi.RunError) as raised:
        mock_stack(settings, mocks=mocks)
    assert f"gcp:region is '{OTHER_REGION}'" in str(raised.value)
    assert f"deployed in '{REGION}'" in str(raised.value)
    declared = [(typ, name) for typ, name, inputs, _, _ in mocks.registered if regional(inputs)]
    assert declared == []
    # The stack reference was read, and nothing behind the pause was declared either.
    types = {typ for typ, *_ in mocks.registered}
    assert STACK_REFERENCE in types
    assert not [
        t for t in types if t.startswith(("gcp:firestore/", "gcp:serviceaccount/", "gcp:artifactregistry/"))
    ]


@pytest.fixture(scope="module", params=[None, REGION], ids=["first-deploy", "same-region"])
def deployed(request: pytest.FixtureRequest) -> MockedStack:
    settings = settings_of()
    previous = (
        {} if request.param is None else {REGION_OUTPUT: request.param, "databaseName": "eos-prod-ledger"}
    )
    return mock_stack(settings, mocks=GcpMocks(settings.project, previous_outputs=previous))


def test_a_first_deploy_and_an_unchanged_region_deploy_and_record_the_region(deployed: MockedStack) -> None:
    assert deployed.component_outputs[REGION_OUTPUT] == REGION
    (reference,) = deployed.of_type(STACK_REFERENCE)
    assert reference.inputs["name"].endswith(f"/{project_name()}/test")
    assert reference.inputs["name"].count("/") == 2


def test_every_regional_resource_waits_for_the_pause_that_takes_the_checked_region(
    deployed: MockedStack,
) -> None:
    pause = deployed.named(SLEEP, API_PAUSE)
    (reference,) = deployed.of_type(STACK_REFERENCE)
    assert pause.inputs["triggers"]["region"] == REGION
    assert reference.urn in deployed.dependencies[pause.urn]
    regional_resources = [r for r in deployed.resources if r.custom and regional(r.inputs)]
    kinds = {r.type for r in regional_resources}
    # The database, repository, bucket, functions, jobs, and with the template's kinds the
    # workflows, Cloud Run job, dataset, ...
    assert {
        "gcp:firestore/database:Database",
        "gcp:artifactregistry/repository:Repository",
        "gcp:storage/bucket:Bucket",
        "gcp:cloudfunctionsv2/function:Function",
        "gcp:cloudscheduler/job:Job",
        *(regional_type for _, regional_type in PRESENT.values()),
    } <= kinds
    assert [r.name for r in regional_resources if pause.urn not in deployed.waits_for(r.urn)] == []
