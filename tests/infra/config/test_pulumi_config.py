"""settings_from_pulumi_config: the program's path from `pulumi config` to StackSettings."""

from __future__ import annotations

import json

import pulumi
import pytest
from pulumi.runtime import config as runtime_config

from infra.settings.from_pulumi import settings_from_pulumi_config
from tests.infra.conftest import NAMESPACE, valid_job
from tests.support.optional import needs_proxy_kinds
from tools import mocked_program as pulumi_harness
from tools.mocked_program import MOCK_STACK, run_main


def test_string_values_are_parsed_by_declared_type(pulumi_config: dict[str, str]) -> None:
    runtime_config.set_all_config(pulumi_config)
    settings = settings_from_pulumi_config()
    assert (settings.project, settings.region) == ("p-123", "us-east1")
    assert settings.function_timeout_seconds == 60
    assert settings.deletion_protection is False
    assert settings.retention_seconds == 86400  # unset: the default applies
    assert [job.name for job in settings.jobs] == ["every-5"]
    assert (settings.create_database, settings.alert_notification_channels) == (True, ())


def test_list_and_derived_keys_are_read_from_pulumi_config(pulumi_config: dict[str, str]) -> None:
    channels = ["projects/p-123/notificationChannels/1", "projects/p-123/notificationChannels/2"]
    pulumi_config[f"{NAMESPACE}:alertNotificationChannels"] = json.dumps(channels)
    pulumi_config[f"{NAMESPACE}:databaseName"] = "(default)"
    runtime_config.set_all_config(pulumi_config)
    settings = settings_from_pulumi_config()
    assert settings.alert_notification_channels == tuple(channels)
    assert (settings.database_name, settings.create_database) == ("(default)", False)


def test_bad_config_fails_cleanly_before_any_resource(pulumi_config: dict[str, str]) -> None:
    pulumi_config[f"{NAMESPACE}:jobs"] = json.dumps([valid_job(attemptDeadlineSeconds=5)])
    runtime_config.set_all_config(pulumi_config)
    with pytest.raises(
        pulumi.RunError, match=rf"stack '{MOCK_STACK}'[\s\S]*jobs\[0\]\.attemptDeadlineSeconds"
    ):
        settings_from_pulumi_config()


def test_non_integer_string_names_the_key(pulumi_config: dict[str, str]) -> None:
    pulumi_config[f"{NAMESPACE}:maxInstances"] = "many"
    runtime_config.set_all_config(pulumi_config)
    with pytest.raises(pulumi.RunError, match="maxInstances"):
        settings_from_pulumi_config()


def test_main_exports_the_stack_outputs(pulumi_config: dict[str, str]) -> None:
    mocks = pulumi_harness.GcpMocks("p-123")
    exports = run_main(pulumi_config, mocks)
    # The configured job and the stack's own missed-run audit.
    assert [typ for typ, *_ in mocks.registered].count("gcp:cloudscheduler/job:Job") == 2
    assert exports == {
        "functionUri": "https://eos-test-handler-xyz-uc.a.run.app",
        "jobNames": ["eos-test_every-5", "eos-test_missed-run-audit"],
        "runtimeServiceAccount": "eos-test-runtime@p-123.iam.gserviceaccount.com",
        "invokerServiceAccount": "eos-test-invoker@p-123.iam.gserviceaccount.com",
        "buildServiceAccount": "eos-test-builder@p-123.iam.gserviceaccount.com",
        "databaseName": "eos-test-ledger",
        "runsCollection": "scheduler_runs",
        "region": "us-east1",
    }


@needs_proxy_kinds
def test_main_exports_the_proxy_outputs_only_with_a_sample_workflow(pulumi_config: dict[str, str]) -> None:
    jobs = [valid_job(), valid_job(name="proxied", body=None, workflow={"sample": True})]
    pulumi_config[f"{NAMESPACE}:jobs"] = json.dumps(
        [{k: v for k, v in job.items() if v is not None} for job in jobs]
    )
    exports = run_main(pulumi_config, pulumi_harness.GcpMocks("p-123"))
    assert exports["tokenCheckUri"].startswith("https://eos-test-token-check-")
    assert exports["tokenCheckServiceAccount"] == "eos-test-tokens@p-123.iam.gserviceaccount.com"
    assert exports["workflowServiceAccount"] == "eos-test-workflow@p-123.iam.gserviceaccount.com"
    assert set(exports["sampleWorkflows"]) == {"proxied"}


def test_main_with_bad_config_registers_no_resource(pulumi_config: dict[str, str]) -> None:
    pulumi_config[f"{NAMESPACE}:retentionSeconds"] = "60"
    mocks = pulumi_harness.GcpMocks("p-123")
    with pytest.raises(pulumi.RunError, match=f"{NAMESPACE}:retentionSeconds"):
        run_main(pulumi_config, mocks)
    assert mocks.registered == []


def test_a_renamed_project_reads_its_keys_from_its_own_namespace(pulumi_config: dict[str, str]) -> None:
    """A fork renames the project (Pulumi.yaml `name:`) and its keys move with it."""
    renamed = {
        key.replace(f"{NAMESPACE}:", "acme-nightly:") if key.startswith(f"{NAMESPACE}:") else key: value
        for key, value in pulumi_config.items()
    }
    renamed["acme-nightly:maxInstances"] = "4"
    mocks = pulumi_harness.GcpMocks("p-123")
    exports = run_main(renamed, mocks, project="acme-nightly")
    assert exports["jobNames"] == ["eos-test_every-5", "eos-test_missed-run-audit"]
    (function,) = [inputs for typ, _, inputs, *_ in mocks.registered if typ.endswith("function:Function")]
    assert function["serviceConfig"]["maxInstanceCount"] == 4
    # The old namespace is not read at all: with only its keys, no job is configured.
    with pytest.raises(pulumi.RunError, match="acme-nightly:jobs: at least one job is required"):
        run_main(pulumi_config, pulumi_harness.GcpMocks("p-123"), project="acme-nightly")


def test_main_refuses_a_region_other_than_the_last_updates(pulumi_config: dict[str, str]) -> None:
    """The program as `pulumi up` runs it, with the stack's last outputs recording another
    region: a clean error naming both, and nothing regional declared."""
    mocks = pulumi_harness.GcpMocks("p-123", previous_outputs={"region": "europe-west1"})
    with pytest.raises(
        pulumi.RunError, match=r"gcp:region is 'us-east1', but stack '\S+' is deployed in 'europe-west1'"
    ):
        run_main(pulumi_config, mocks)
    assert not [
        name for typ, name, inputs, *_ in mocks.registered if "location" in inputs or "locationId" in inputs
    ]
