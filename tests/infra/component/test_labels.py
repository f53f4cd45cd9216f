"""Every resource the stack declares that can carry labels carries `eos-stack: <stack>` and the
fork's own labels, under Pulumi's mocks, with every option on (tests/infra/conftest.py's
every_option_stack): the samples of each target kind present, a catch-up queue, a second
region, the monitoring. Which types can carry labels is read here from the provider's argument
classes' properties, not from the program's own reading of their constructors."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import pulumi
import pytest

from infra.config.labels import STACK_LABEL
from infra.resources.labels import label_argument, labelling
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KEYS
from tests.infra.conftest import FORK_LABELS, build, every_option_values
from tools.mocked_program import MockedResource, MockedStack

# The Python packages of the type tokens' first parts.
_PACKAGES = {"gcp": "pulumi_gcp", "time": "pulumiverse_time", "pulumi": "pulumi"}
# The label arguments, by the engine's (camelCase) names and the Args classes' (Python) names.
_LABEL_INPUTS = {"labels": "labels", "userLabels": "user_labels"}


def _resource_class(type_token: str) -> type[Any]:
    """`gcp:cloudtasks/queue:Queue` → pulumi_gcp.cloudtasks.Queue; `time:index/static:Static` →
    pulumiverse_time.Static; `pulumi:pulumi:StackReference` → pulumi.StackReference."""
    package, module, name = type_token.split(":")
    top = module.split("/")[0]
    path = _PACKAGES[package] if top in ("index", "pulumi") else f"{_PACKAGES[package]}.{top}"
    resource_class: type[Any] = getattr(importlib.import_module(path), name)
    return resource_class


def _label_input(type_token: str) -> str | None:
    """The input that holds a resource's labels, from the properties of its `<Class>Args`."""
    resource_class = _resource_class(type_token)
    args_class = getattr(
        importlib.import_module(resource_class.__module__), f"{resource_class.__name__}Args", None
    )
    return next(
        (
            wire
            for wire, python in _LABEL_INPUTS.items()
            if isinstance(getattr(args_class, python, None), property)
        ),
        None,
    )


def unlabelled(resources: list[MockedResource], expected: dict[str, str]) -> dict[str, Any]:
    """Each resource that can carry labels and does not carry exactly `expected`, with what it has."""
    return {
        resource.name: resource.inputs.get(label_input)
        for resource in resources
        if resource.custom
        and (label_input := _label_input(resource.type)) is not None
        and resource.inputs.get(label_input) != expected
    }


@pytest.fixture(scope="module")
def expected() -> dict[str, str]:
    return {STACK_LABEL: build(every_option_values()).names.stack_label(), **FORK_LABELS}


def test_every_resource_that_can_carry_labels_carries_the_stacks_and_the_forks(
    every_option_stack: MockedStack, expected: dict[str, str]
) -> None:
    labelled = {r.type for r in every_option_stack.resources if r.custom and _label_input(r.type)}
    # What this stack declares that carries labels (the samples' with the kinds present): the
    # reading above found them, so it cannot pass by finding none.
    assert {
        "gcp:cloudfunctionsv2/function:Function",
        "gcp:storage/bucket:Bucket",
        "gcp:artifactregistry/repository:Repository",
        "gcp:monitoring/alertPolicy:AlertPolicy",
    } <= labelled
    kinds = {"workflow": "gcp:workflows/workflow:Workflow", "cloudRunJob": "gcp:cloudrunv2/job:Job"}
    kinds["bigquery"] = "gcp:bigquery/dataset:Dataset"
    assert {type_ for key, type_ in kinds.items() if key in TARGET_KEYS} <= labelled
    assert unlabelled(every_option_stack.resources, expected) == {}


def test_a_resource_that_lost_its_labels_is_found(
    every_option_stack: MockedStack, expected: dict[str, str]
) -> None:
    """Guards the test above: one resource without its labels, or without the fork's, is named."""
    resources = list(every_option_stack.resources)
    (index, bucket), *_ = [(i, r) for i, r in enumerate(resources) if r.type == "gcp:storage/bucket:Bucket"]
    resources[index] = dataclasses.replace(
        bucket, inputs={k: v for k, v in bucket.inputs.items() if k != "labels"}
    )
    (alert_index, alert), *_ = [
        (i, r) for i, r in enumerate(resources) if r.type == "gcp:monitoring/alertPolicy:AlertPolicy"
    ]
    resources[alert_index] = dataclasses.replace(
        alert, inputs={**alert.inputs, "userLabels": {STACK_LABEL: expected[STACK_LABEL]}}
    )
    assert unlabelled(resources, expected) == {
        bucket.name: None,
        alert.name: {STACK_LABEL: expected[STACK_LABEL]},
    }


def test_the_program_and_this_test_agree_on_which_types_carry_labels(every_option_stack: MockedStack) -> None:
    """The program reads the Args classes' constructors, this test their properties."""
    for resource in every_option_stack.resources:
        if resource.custom:
            wire = _label_input(resource.type)
            python = label_argument(_resource_class(resource.type))
            assert (_LABEL_INPUTS[wire] if wire else None) == python, resource.type


class WidgetArgs:
    """A provider's arguments for a resource that carries labels."""

    def __init__(self, labels: dict[str, str] | None = None) -> None:
        self.labels = labels


class Widget(pulumi.CustomResource):
    """A resource of a provider whose module defines its Args beside it, as pulumi_gcp's do."""


class Gadget(pulumi.CustomResource):
    """A resource whose arguments hold no labels: no `GadgetArgs` beside it."""


def _transformed(resource_class: type[pulumi.CustomResource], props: dict[str, Any]) -> dict[str, Any] | None:
    transformation = labelling({STACK_LABEL: "dev", "team": "data"})
    args = pulumi.ResourceTransformationArgs(
        resource_class.__new__(resource_class), "test:index:Widget", "w", props, pulumi.ResourceOptions()
    )
    result = transformation(args)
    return None if result is None else dict(result.props)


def test_a_resources_own_labels_are_kept_and_the_stacks_added_over_them() -> None:
    assert _transformed(Widget, {"labels": None, "size": 1}) == {
        "labels": {STACK_LABEL: "dev", "team": "data"},
        "size": 1,
    }
    assert _transformed(Widget, {"labels": {"purpose": "x", "team": "y"}}) == {
        "labels": {"purpose": "x", STACK_LABEL: "dev", "team": "data"}
    }
    assert _transformed(Gadget, {"labels": None}) is None
