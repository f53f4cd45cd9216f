"""The component's name is its first argument, as every Pulumi component's is: under the name
`__main__.py` gives it, every resource keeps the URN it was deployed under, and two components of
one stack, each under a name of its own, share nothing that needs a unique name."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.component import ExactlyOnceScheduler, ExactlyOnceSchedulerArgs
from infra.config.schema import project_name
from policy.scheduler_guardrails.rules.config.names import COMPONENT_NAME
from tests.infra.conftest import build, valid_job, valid_values
from tests.support.optional import needs_proxy_kinds
from tests.support.stacks import fixture_stack
from tools.mocked_program import GcpMocks, MockedResource, mock_stack, run_under_mocks

# The URNs of the fixture stacks as the component declared them when its name was fixed inside
# it ("eos"), recorded from that code: a deployed stack whose URNs changed would see Pulumi
# replace (delete and recreate) every resource, its run ledger included.
DEPLOYED_URNS = Path(__file__).with_name("deployed_urns.json")

# The inputs that name what a resource is in Google Cloud, by type (the project, and the
# location where the name is only unique in one, are part of the identity). Left out: the APIs
# (`projects.Service`), which two components enable alike and never disable, and the pauses,
# Firestore index settings and IAM members, whose identity is that of what they refer to.
_IDENTITY = {
    "gcp:artifactregistry/repository:Repository": ("project", "location", "repositoryId"),
    "gcp:bigquery/dataset:Dataset": ("project", "datasetId"),
    "gcp:cloudfunctionsv2/function:Function": ("project", "location", "name"),
    "gcp:cloudscheduler/job:Job": ("project", "region", "name"),
    "gcp:cloudtasks/queue:Queue": ("project", "location", "name"),
    "gcp:firestore/database:Database": ("project", "name"),
    "gcp:logging/metric:Metric": ("project", "name"),
    "gcp:monitoring/alertPolicy:AlertPolicy": ("project", "displayName"),
    "gcp:serviceaccount/account:Account": ("project", "accountId"),
    "gcp:storage/bucketObject:BucketObject": ("bucket", "name"),
    "gcp:workflows/workflow:Workflow": ("project", "region", "name"),
}


def _declared_and_deployed(stack: str) -> tuple[list[str], list[str]]:
    """The fixture stack's URNs as the component declares them under its usual name, and as
    they were recorded."""
    deployed: list[str] = json.loads(DEPLOYED_URNS.read_text(encoding="utf-8"))[stack]
    declared = mock_stack(fixture_stack(stack), stack=stack, name=COMPONENT_NAME).resources
    return sorted(resource.urn for resource in declared), deployed


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_under_its_usual_name_every_resource_keeps_the_urn_it_was_deployed_under(stack: str) -> None:
    """Every URN declared now is one the stack was deployed under: nothing is replaced. A
    checkout without some optional part declares fewer resources (the dev stack's samples of
    the target kinds), never one under a new URN."""
    declared, deployed = _declared_and_deployed(stack)
    assert [urn for urn in declared if urn not in deployed] == []


@needs_proxy_kinds
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_under_its_usual_name_every_resource_it_was_deployed_with_is_declared(stack: str) -> None:
    """Nothing recorded is missing either: the recording holds the target kinds' samples."""
    declared, deployed = _declared_and_deployed(stack)
    assert declared == deployed


def _two_components(first: str, second: str) -> list[MockedResource]:
    """Both components in one program, on one stack's settings (samples, a catch-up queue and
    a workflow job included, so every kind of named resource is declared twice)."""
    settings = build(
        valid_values(
            samples=True,
            jobs=[
                valid_job(),
                valid_job(name="nightly", schedule="0 3 * * *", catchup={"windowSeconds": 7200}),
            ],
        ),
        stack="dev",
    )

    def program() -> pulumi.Output[Any]:
        components = [
            ExactlyOnceScheduler(name, ExactlyOnceSchedulerArgs(settings)) for name in (first, second)
        ]
        return pulumi.Output.all(*(value for c in components for value in c.outputs.values()))

    resources, _, _ = run_under_mocks(
        program, GcpMocks(settings.project), project=project_name(), stack="dev"
    )
    return resources


def _identities(resources: list[MockedResource]) -> list[tuple[Any, ...]]:
    return [
        (
            resource.type,
            *(json.dumps(resource.inputs.get(key), sort_keys=True) for key in _IDENTITY[resource.type]),
        )
        for resource in resources
        if resource.type in _IDENTITY
    ]


def test_two_components_in_one_stack_share_no_urn_and_no_name() -> None:
    resources = _two_components(COMPONENT_NAME, "nightly")
    one = [r for r in resources if r.urn.endswith(f"::{COMPONENT_NAME}") or f"::{COMPONENT_NAME}-" in r.urn]
    assert len(resources) == 2 * len(one), "each component declares the same resources"
    assert [urn for urn, count in Counter(r.urn for r in resources).items() if count > 1] == []
    identities = _identities(resources)
    assert len(identities) > 20
    assert [identity for identity, count in Counter(identities).items() if count > 1] == []


def test_a_name_the_ids_cannot_start_with_is_refused_naming_it() -> None:
    with pytest.raises(
        Exception, match=r"ExactlyOnceScheduler 'Nightly_Jobs': component name 'Nightly_Jobs' must"
    ):
        mock_stack(build(valid_values()), name="Nightly_Jobs")
