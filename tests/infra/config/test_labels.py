"""`labels`: a fork's own labels, checked by Google Cloud's rules before any resource is
declared, each bad one named by its config key with the limit it breaks; and the stack's own
label, `eos-stack`, which a fork may not set and whose value any stack name gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config.labels import LABEL_KEY, LABEL_VALUE, MAX_FORK_LABELS, STACK_LABEL
from infra.config.schema import KEYS_BY_NAME, REPO_ROOT, declared_config_keys
from infra.settings.from_pulumi import settings_from_pulumi_config
from infra.settings.loading import load_stack_settings
from policy.scheduler_guardrails.rules.config.names import StackNames
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from tests.infra.conftest import FORK_LABELS, NAMESPACE, build, error_of, valid_values

KEY = f"{NAMESPACE}:labels"


def _lines(labels: Any) -> list[str]:
    message = error_of(valid_values(labels=labels))
    return [line.removeprefix("  - ") for line in message.splitlines()[1:]]


def test_the_forks_labels_follow_the_stacks_own_in_every_resources_labels() -> None:
    settings = build(valid_values(labels=FORK_LABELS), stack="dev")
    assert settings.labels == tuple(FORK_LABELS.items())
    assert settings.resource_labels == {STACK_LABEL: "dev", **FORK_LABELS}


def test_without_labels_every_resource_carries_the_stacks_label_alone() -> None:
    assert (KEYS_BY_NAME["labels"].type, KEYS_BY_NAME["labels"].default) == ("object", {})
    assert build(valid_values()).resource_labels == {STACK_LABEL: "prod"}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "map", "default": {}, "description": "a map, with a type Pulumi does not have"},
        {"default": "", "description": "untyped, and not a map"},
    ],
)
def test_only_a_map_default_may_go_without_a_type(tmp_path: Path, schema: dict[str, object]) -> None:
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "p", "config": {"someKey": schema}}))
    with pytest.raises(SettingsError, match="config key 'someKey' needs a type, default and description"):
        declared_config_keys(tmp_path)


@pytest.mark.parametrize(
    ("labels", "line"),
    [
        (
            {"Team": "data"},
            f"{KEY}.Team: 'Team' is not a label key: a label key is 1-63 of lower-case letters, digits, "
            "'_' and '-', starting with a letter",
        ),
        (
            {"9lives": "x"},
            f"{KEY}.9lives: '9lives' is not a label key: a label key is 1-63 of lower-case letters, digits, "
            "'_' and '-', starting with a letter",
        ),
        (
            {"k" * 64: "x"},
            f"{KEY}.{'k' * 64}: '{'k' * 64}' is 64 characters long; a label key is 1-63 of lower-case "
            "letters, digits, '_' and '-', starting with a letter",
        ),
        (
            {"cost.center": "x"},
            f"{KEY}[\"cost.center\"]: 'cost.center' is not a label key: a label key is 1-63 of lower-case "
            "letters, digits, '_' and '-', starting with a letter",
        ),
        (
            {"team": "Data Platform"},
            f"{KEY}.team: 'Data Platform' is not a label value: a label value is 0-63 of lower-case "
            "letters, digits, '_' and '-'",
        ),
        (
            {"team": "v" * 64},
            f"{KEY}.team: '{'v' * 64}' is 64 characters long; a label value is 0-63 of lower-case "
            "letters, digits, '_' and '-'",
        ),
        (
            {"team": ["a"]},
            f"{KEY}.team: ['a'] is not a string; a label value is a string ('' for none)",
        ),
        (
            {STACK_LABEL: "other"},
            f"{KEY}.{STACK_LABEL}: '{STACK_LABEL}' is the stack's own label (its name, on every resource); "
            "choose another key",
        ),
        (
            {"goog-pulumi-provisioned": "false"},
            f"{KEY}.goog-pulumi-provisioned: 'goog-pulumi-provisioned' is the label Pulumi's Google Cloud "
            "provider sets; choose another key",
        ),
        (["team=data"], f"{KEY}: expected a map of keys to string values, got ['team=data']"),
    ],
    ids=[
        "capitals",
        "leading digit",
        "long key",
        "dot",
        "value charset",
        "long value",
        "not a string",
        "stack label",
        "provider label",
        "not a map",
    ],
)
def test_a_bad_label_is_refused_naming_its_key_and_the_rule(labels: Any, line: str) -> None:
    assert _lines(labels) == [line]


def test_every_bad_label_is_named_at_once_and_the_good_ones_pass() -> None:
    lines = _lines({"team": "data", "Owner": "x", "env": "Prod", "empty": ""})
    assert [line.split(":")[1] for line in lines] == ["labels.Owner", "labels.env"]


def test_more_labels_than_a_resource_has_room_for_are_refused_naming_the_limit() -> None:
    labels = {f"l{index}": "x" for index in range(MAX_FORK_LABELS + 1)}
    assert _lines(labels) == [
        f"{KEY}: 63 labels; at most 62: a resource carries at most 64, and eos-stack and "
        "goog-pulumi-provisioned take two of them"
    ]
    assert build(valid_values(labels=dict(list(labels.items())[:MAX_FORK_LABELS]))).labels


def test_numbers_and_booleans_are_label_values_as_written() -> None:
    """`pulumi config set --path labels.cost 1234` stores a number, and `true` a boolean."""
    settings = build(valid_values(labels={"cost": 1234, "billable": True, "none": ""}))
    assert dict(settings.labels) == {"cost": "1234", "billable": "true", "none": ""}


def test_labels_written_in_a_stack_file_reach_the_settings(tmp_path: Path) -> None:
    """As a fork writes them in `Pulumi.<stack>.yaml`; a stack file without them gets none."""
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "function").symlink_to(REPO_ROOT / "function")
    config = {
        "gcp:project": "p1",
        "gcp:region": "europe-west1",
        **{f"{NAMESPACE}:{k}": v for k, v in valid_values().items()},
    }
    (tmp_path / "Pulumi.plain.yaml").write_text(yaml.safe_dump({"config": config}))
    (tmp_path / "Pulumi.team.yaml").write_text(yaml.safe_dump({"config": {**config, KEY: FORK_LABELS}}))
    assert load_stack_settings("plain", root=tmp_path).labels == ()
    assert load_stack_settings("team", root=tmp_path).resource_labels == {STACK_LABEL: "team", **FORK_LABELS}


def test_labels_set_with_pulumi_config_reach_the_settings(pulumi_config: dict[str, str]) -> None:
    from pulumi.runtime import config as runtime_config

    pulumi_config[KEY] = json.dumps(FORK_LABELS)
    runtime_config.set_all_config(pulumi_config)
    assert dict(settings_from_pulumi_config().labels) == FORK_LABELS


@pytest.mark.parametrize(
    "stack",
    ["dev", "prod-eu", "Team.Platform_EU", "team-platform_eu", "x" * 100, "x" * 99 + "y", "-_-", "9lives"],
)
def test_any_stack_name_is_a_label_value_and_two_stacks_never_share_one(stack: str) -> None:
    value = StackNames(stack).stack_label()
    assert LABEL_VALUE.match(value) and len(value) <= 63, value
    assert LABEL_KEY.match(STACK_LABEL)
    if stack == stack.lower() and len(stack) <= 63 and "." not in stack:
        assert value == stack  # readable as written whenever a label value can hold it


def test_stack_names_that_only_differ_where_a_label_cannot_show_it_get_different_values() -> None:
    values = {StackNames(stack).stack_label() for stack in ("Team.EU", "team.eu", "team-eu", "x" * 99 + "a")}
    values |= {StackNames("x" * 99 + "b").stack_label()}
    assert len(values) == 5
