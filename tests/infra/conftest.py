"""Shared builders for the stack tests: a valid config to break one key at a time."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.config.schema import project_name
from infra.settings.loading import settings_from_config
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.access import GRANT_KINDS
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KEYS
from tools.mocked_program import MockedStack, mock_stack

PROJECT = "acme-prod"
# The config namespace: the Pulumi project's name, as Pulumi.yaml spells it.
NAMESPACE = project_name()
REGION = "europe-west1"
SECOND_REGION = "europe-west4"
# A fork's own labels, as `labels` sets them.
FORK_LABELS = {"team": "data-platform", "cost-center": "cc_1234"}
DEMO_HANDLER = "jobs.demo:run_demo_job"


def valid_job(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": "every-5",
        "schedule": "*/15 * * * *",
        "timeZone": "Etc/UTC",
        "attemptDeadlineSeconds": 60,
        "retry": {"retryCount": 5, "minBackoffSeconds": 10, "maxBackoffSeconds": 300, "maxDoublings": 3},
    }
    job.update(overrides)
    return job


def valid_values(**overrides: Any) -> dict[str, Any]:
    # The demo job for every job that names no handler: a stack without jobHandler refuses those.
    values: dict[str, Any] = {"functionTimeoutSeconds": 60, "jobHandler": DEMO_HANDLER, "jobs": [valid_job()]}
    values.update(copy.deepcopy(overrides))
    return values


def build(values: dict[str, Any], stack: str = "prod") -> StackSettings:
    return settings_from_config(values, project=PROJECT, region=REGION, stack=stack, namespace=NAMESPACE)


def error_of(values: dict[str, Any]) -> str:
    """The message of the SettingsError `values` are refused with."""
    with pytest.raises(SettingsError) as raised:
        build(values)
    return str(raised.value)


@pytest.fixture
def two_job_settings() -> StackSettings:
    return build(
        valid_values(
            jobs=[
                valid_job(name="every-5", body={"sleep_seconds": 2}, handler="jobs.noop:do_nothing"),
                valid_job(name="nightly", schedule="0 3 * * *", timeZone="Europe/Berlin"),
            ]
        )
    )


# A resource of each kind a job's `grants` may name.
GRANTED: dict[str, str] = {
    "cloudRunJob": f"projects/{PROJECT}/locations/europe-west1/jobs/nightly-export",
    "cloudRunService": f"projects/{PROJECT}/locations/europe-west1/services/reports",
    "dataset": "acme-data.archive",
    "secret": f"projects/{PROJECT}/secrets/api-token",
    "topic": f"projects/{PROJECT}/topics/rollups",
    "subscription": f"projects/{PROJECT}/subscriptions/rollups-audit",
    "bucket": "acme-exports",
}
# Jobs of the kinds present beyond the samples `samples: true` adds: a sample Cloud Run job
# (which it leaves out) and a BigQuery job that reads a dataset (the sample only writes).
KIND_JOBS: dict[str, dict[str, Any]] = {
    "cloudRunJob": valid_job(name="sample-job", cloudRunJob={"sample": True}),
    "bigquery": valid_job(
        name="rollup",
        schedule="0 * * * *",
        bigquery={
            "query": "SELECT 1",
            "location": "EU",
            "readDatasets": ["acme-data.sales"],
            "writeDatasets": ["acme-data.reports"],
        },
    ),
}


def every_option_values() -> dict[str, Any]:
    """A config with every option the program deploys something for: the samples (the demo job
    and the sample job of each target kind present), the jobs of each kind present that the
    samples leave out, a catch-up job, a job with secrets, variables and a grant of every role
    a job may ask for, a second region, alert channels, and the fork's own labels."""
    grants = [
        {"role": role, kind.key: GRANTED[kind.key]} for kind in GRANT_KINDS for role in sorted(kind.roles)
    ]
    jobs = [
        valid_job(
            name="granted",
            grants=grants,
            secrets={"WAREHOUSE_PASSWORD": "warehouse-password"},
            env={"EXPORT_REGION": "eu"},
        ),
        valid_job(name="catching-up", schedule="0 * * * *", catchup={"windowSeconds": 86400}),
        *(job for key, job in KIND_JOBS.items() if key in TARGET_KEYS),
    ]
    return valid_values(
        samples=True,
        secondRegion=SECOND_REGION,
        databaseLocation="eur3",
        alertNotificationChannels=[f"projects/{PROJECT}/notificationChannels/1"],
        labels=FORK_LABELS,
        jobs=jobs,
    )


@pytest.fixture(scope="session")
def every_option_stack() -> MockedStack:
    """The stack of every_option_values, as `pulumi up` declares it: one mocked run a session."""
    return mock_stack(build(every_option_values()))
