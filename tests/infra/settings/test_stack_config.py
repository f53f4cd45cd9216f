"""A stack's config as `pulumi up` resolves it: through the Pulumi CLI where it is on PATH (its
environments and secrets included), from the files where it is not, and one clear line for
what the files cannot say."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.settings.loading import load_stack_settings
from infra.settings.stack_config import read_stack_config
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from tests.infra.conftest import NAMESPACE
from tests.infra.settings.conftest import (
    ENVIRONMENT,
    FROM_ENVIRONMENT,
    NIGHTLY,
    esc_stack_text,
    resolved,
    write_stack,
)
from tests.support.pulumi_cli import StandInPulumi
from tests.support.stacks import FIXTURE_STACKS

CONFIG_COMMAND = ["config", "--json", "--open", "--stack", "prod", "--non-interactive"]


def _file_config(stack: str) -> dict[str, Any]:
    """The config section of the template's fixture stack `stack`."""
    text = (FIXTURE_STACKS / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")
    config: dict[str, Any] = yaml.safe_load(text)["config"]
    return config


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_clis_answer_reads_as_the_files_do(
    stack: str, project: Path, pulumi_cli: StandInPulumi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every value, the jobs' lists of objects, integers and booleans included, comes out of the
    CLI's strings and objects as the same Python value the YAML gives."""
    write_stack(project, stack, (FIXTURE_STACKS / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))
    pulumi_cli.answer(stack, resolved(_file_config(stack)))
    through_cli = read_stack_config(stack, project)
    assert pulumi_cli.calls() == [[*CONFIG_COMMAND[:4], stack, CONFIG_COMMAND[-1]]]
    monkeypatch.setenv("PATH", "")
    assert read_stack_config(stack, project) == through_cli
    assert isinstance(through_cli.values["jobs"], list) and through_cli.values["maxInstances"] >= 1


def test_an_environments_project_and_region_come_from_the_cli(
    project: Path, pulumi_cli: StandInPulumi
) -> None:
    write_stack(project, "prod", esc_stack_text())
    pulumi_cli.answer("prod", resolved({f"{NAMESPACE}:jobs": [NIGHTLY]}, FROM_ENVIRONMENT))
    settings = load_stack_settings("prod", project)
    assert (settings.project, settings.region) == ("esc-project", "us-east1")
    assert [job.name for job in settings.jobs] == ["nightly"]
    assert settings.jobs[0].retry.retry_count == 3
    # Run where Pulumi.yaml is, with the environment opened, and asked for no secret: the
    # environment's access token is one, which the settings never read.
    assert pulumi_cli.calls() == [CONFIG_COMMAND]
    assert pulumi_cli.working_folders() == [project]


def test_a_list_or_a_map_set_as_a_json_string_is_read_as_the_program_reads_it(
    project: Path, pulumi_cli: StandInPulumi
) -> None:
    """`pulumi config set jobs '[...]'` stores a string, which the program's get_object parses;
    so does `pulumi config set labels '{...}'`."""
    write_stack(project, "prod", esc_stack_text())
    channels = ["projects/esc-project/notificationChannels/7"]
    labels = {"team": "data-platform"}
    config = {
        f"{NAMESPACE}:jobs": json.dumps([NIGHTLY]),
        f"{NAMESPACE}:alertNotificationChannels": json.dumps(channels),
        f"{NAMESPACE}:labels": json.dumps(labels),
    }
    pulumi_cli.answer("prod", resolved(config, FROM_ENVIRONMENT))
    settings = load_stack_settings("prod", project)
    assert [job.name for job in settings.jobs] == ["nightly"]
    assert settings.alert_notification_channels == tuple(channels)
    assert dict(settings.labels) == labels


def test_a_secret_the_settings_read_is_asked_for_once_more_with_show_secrets(
    project: Path, pulumi_cli: StandInPulumi
) -> None:
    write_stack(project, "prod", esc_stack_text())
    config = resolved({f"{NAMESPACE}:jobs": [NIGHTLY], f"{NAMESPACE}:maxInstances": 4}, FROM_ENVIRONMENT)
    pulumi_cli.answer("prod", config, secrets=(f"{NAMESPACE}:maxInstances", f"{NAMESPACE}:jobs"))
    settings = load_stack_settings("prod", project)
    assert settings.max_instances == 4 and [job.name for job in settings.jobs] == ["nightly"]
    assert pulumi_cli.calls() == [CONFIG_COMMAND, [*CONFIG_COMMAND, "--show-secrets"]]


def test_a_secret_key_the_settings_do_not_know_is_reported_unread(
    project: Path, pulumi_cli: StandInPulumi
) -> None:
    write_stack(project, "prod", esc_stack_text())
    config = resolved({f"{NAMESPACE}:jobs": [NIGHTLY], f"{NAMESPACE}:apiKey": "s3cr3t"}, FROM_ENVIRONMENT)
    pulumi_cli.answer("prod", config, secrets=(f"{NAMESPACE}:apiKey",))
    with pytest.raises(SettingsError, match=rf"{NAMESPACE}:apiKey: unknown config key") as raised:
        load_stack_settings("prod", project)
    assert "s3cr3t" not in str(raised.value)
    assert pulumi_cli.calls() == [CONFIG_COMMAND]


def test_the_templates_own_stacks_are_read_from_their_files(pulumi_cli: StandInPulumi) -> None:
    settings = load_stack_settings("prod", stacks_dir=FIXTURE_STACKS)
    assert settings.project == _file_config("prod")["gcp:project"]
    assert pulumi_cli.calls() == []


def test_a_cli_that_fails_on_a_plain_stack_leaves_it_to_the_file(
    project: Path, pulumi_cli: StandInPulumi
) -> None:
    write_stack(project, "prod", (FIXTURE_STACKS / "Pulumi.prod.yaml").read_text(encoding="utf-8"))
    pulumi_cli.fail("error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions\n")
    assert load_stack_settings("prod", project).project == _file_config("prod")["gcp:project"]
    assert len(pulumi_cli.calls()) == 1


@pytest.mark.parametrize(
    ("fail", "says"),
    [
        (
            "warning: something first\nerror: no stack named 'prod' found\n",
            "failed with exit status 255: error: no stack named 'prod' found",
        ),
        ("warning: only this\n", "failed with exit status 255: warning: only this"),
        ("", "failed with exit status 255: nothing on stderr"),
    ],
)
def test_a_cli_that_fails_on_an_esc_stack_is_named_with_what_it_said(
    project: Path, pulumi_cli: StandInPulumi, fail: str, says: str
) -> None:
    write_stack(project, "prod", esc_stack_text())
    pulumi_cli.fail(fail)
    with pytest.raises(SettingsError) as raised:
        load_stack_settings("prod", project)
    line = str(raised.value)
    assert "\n" not in line and "is not set" not in line
    assert f"imports the Pulumi ESC environment {ENVIRONMENT}" in line
    assert f"`pulumi {' '.join(CONFIG_COMMAND)}` {says}: fix that, then run this again" in line


def test_a_stack_the_backend_does_not_have_is_named(project: Path, pulumi_cli: StandInPulumi) -> None:
    write_stack(project, "prod", esc_stack_text())
    with pytest.raises(SettingsError, match="error: no stack named 'prod' found: fix that"):
        load_stack_settings("prod", project)


def test_a_cli_that_hangs_is_given_up_on_in_bounded_time(project: Path, pulumi_cli: StandInPulumi) -> None:
    write_stack(project, "prod", esc_stack_text())
    pulumi_cli.hang(30)
    started = time.monotonic()
    with pytest.raises(SettingsError, match=r"--non-interactive` gave no answer within 0\.5 s") as raised:
        read_stack_config("prod", project, timeout_seconds=0.5)
    assert time.monotonic() - started < 10
    assert ENVIRONMENT in str(raised.value)


@pytest.mark.parametrize(
    "block",
    [f"environment: [{ENVIRONMENT}]\n", f"environment:\n  - {ENVIRONMENT}\n"],
    ids=["flow", "block"],
)
def test_without_the_cli_an_esc_stack_names_the_environment_and_what_to_do(
    project: Path, no_pulumi_cli: None, block: str
) -> None:
    write_stack(project, "prod", esc_stack_text(block))
    with pytest.raises(SettingsError) as raised:
        load_stack_settings("prod", project)
    assert str(raised.value) == (
        f"stack 'prod' (Pulumi.prod.yaml) imports the Pulumi ESC environment {ENVIRONMENT}, whose "
        "values (gcp:project, gcp:region or any other key) only the Pulumi CLI can read; install the "
        "Pulumi CLI and log in (`pulumi login`), then run this again"
    )


def test_every_environment_is_named_those_with_options_and_an_inline_one_too(
    project: Path, no_pulumi_cli: None
) -> None:
    block = (
        "environment:\n  imports:\n    - base\n    - platform/gcp-prod@3: {merge: false}\n  values: {a: 1}\n"
    )
    write_stack(project, "prod", esc_stack_text(block))
    with pytest.raises(SettingsError, match="environments base, platform/gcp-prod@3, the one defined in"):
        load_stack_settings("prod", project)


def test_without_the_cli_a_secret_the_settings_read_is_named_with_its_path(
    project: Path, no_pulumi_cli: None
) -> None:
    config = _file_config("prod")
    config[f"{NAMESPACE}:ingress"] = {"secure": "AAABAJk2"}
    config[f"{NAMESPACE}:jobs"][0]["body"] = {"token": {"secure": "AAABAGx0"}}
    write_stack(project, "prod", yaml.safe_dump({"config": config}))
    with pytest.raises(SettingsError) as raised:
        load_stack_settings("prod", project)
    assert str(raised.value) == (
        f"stack 'prod' (Pulumi.prod.yaml) holds {NAMESPACE}:ingress, {NAMESPACE}:jobs[0].body.token as "
        "a secret (secure:), which only the Pulumi CLI decrypts; install the Pulumi CLI and log in "
        "(`pulumi login`), then run this again, or set them in plain text in Pulumi.prod.yaml"
    )


def test_without_the_cli_other_secrets_are_left_alone(project: Path, no_pulumi_cli: None) -> None:
    """A provider's secret is nothing the settings read; a secret key of the project that the
    settings do not know is reported as the unknown key it is, as any other."""
    config = {**_file_config("prod"), "gcp:credentials": {"secure": "AAABAHNh"}}
    write_stack(project, "prod", yaml.safe_dump({"config": config}))
    assert load_stack_settings("prod", project).project == config["gcp:project"]
    config[f"{NAMESPACE}:apiKey"] = {"secure": "AAABAHNh"}
    write_stack(project, "prod", yaml.safe_dump({"config": config}))
    with pytest.raises(SettingsError, match=rf"{NAMESPACE}:apiKey: unknown config key") as raised:
        load_stack_settings("prod", project)
    assert "secure" not in str(raised.value)


def test_a_key_simply_absent_is_still_not_set(project: Path, no_pulumi_cli: None) -> None:
    config = {key: value for key, value in _file_config("prod").items() if key != "gcp:project"}
    write_stack(project, "prod", yaml.safe_dump({"config": config}))
    with pytest.raises(SettingsError, match=r"gcp:project is not set \(pulumi config set gcp:project"):
        load_stack_settings("prod", project)
