"""Sample targets: a Cloud Run job per job with `cloudRunJob: {sample: true}`, and the dataset
the jobs with `bigquery: {sample: true}` write to.

The sample Cloud Run job needs no image build: its container is a public Python image running
infra/samples/cloud_run_job.py (standard library only) as `python3 -c`, as its own account that
may invoke the token check and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pulumi
import pulumi_gcp as gcp

from infra.plan.needs import sample_jobs
from infra.resources.identities import run_invoker, service_account
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.grants import SAMPLE_JOB_CALLS_TOKEN_CHECK, Account
from policy.scheduler_guardrails.rules.targets import bigquery, cloud_run_job
from policy.scheduler_guardrails.rules.targets.cloud_run_job import CloudRunJobTarget, resource_name

# A public image with the Python the script needs; Cloud Run pulls it from Docker Hub.
SAMPLE_IMAGE = "docker.io/library/python:3.12-slim"
SAMPLE_SCRIPT_FILE = Path(__file__).resolve().with_name("cloud_run_job.py")
# A sample execution does a few token-check calls; anything longer is a fault.
SAMPLE_TASK_TIMEOUT = "300s"


def sample_cloud_run_jobs(settings: StackSettings) -> tuple[JobSettings, ...]:
    return sample_jobs(settings, cloud_run_job.KIND.key)


def sample_bigquery_jobs(settings: StackSettings) -> tuple[JobSettings, ...]:
    return sample_jobs(settings, bigquery.KIND.key)


class SampleTargets(NamedTuple):
    # Resource name (as runtime grants name it) -> the resource the stack created for it.
    created: dict[str, pulumi.Resource]
    # Grants a sample execution uses at once (its account may invoke the token check).
    grants: list[pulumi.Resource]


def sample_targets(
    name: str,
    settings: StackSettings,
    *,
    parent: pulumi.Resource,
    token_check_uri: pulumi.Input[str] | None,
    token_check_service: pulumi.Input[str] | None,
    apis: list[pulumi.Resource],
) -> SampleTargets:
    created: dict[str, pulumi.Resource] = {}
    grants: list[pulumi.Resource] = []
    jobs = sample_cloud_run_jobs(settings)
    if jobs:
        assert token_check_uri is not None and token_check_service is not None
        account = service_account(
            name,
            Account.SAMPLE_CLOUD_RUN_JOB,
            "sample Cloud Run jobs",
            "Runs the sample Cloud Run jobs; may invoke only the token-check function.",
            settings,
            pulumi.ResourceOptions(parent=parent, depends_on=apis),
        )
        binding = run_invoker(
            f"{name}-crjob-run-invoker",
            SAMPLE_JOB_CALLS_TOKEN_CHECK,
            settings,
            token_check_service,
            account.member,
            pulumi.ResourceOptions(parent=parent),
        )
        grants.append(binding)
        script = SAMPLE_SCRIPT_FILE.read_text(encoding="utf-8")
        for job in jobs:
            assert isinstance(job.target, CloudRunJobTarget)
            created[resource_name(job.target, job.name, settings.placement)] = gcp.cloudrunv2.Job(
                f"{name}-cloud-run-job-{job.name}",
                project=settings.project,
                location=settings.region,
                name=settings.names.cloud_run_job_name(job.name),
                # It holds no data, and protection would block renames and `pulumi destroy`.
                deletion_protection=False,
                template={
                    "template": {
                        "service_account": account.email,
                        "timeout": SAMPLE_TASK_TIMEOUT,
                        "containers": [
                            {
                                "image": SAMPLE_IMAGE,
                                "commands": ["python3", "-c", script],
                                "envs": [{"name": "TOKEN_CHECK_URL", "value": token_check_uri}],
                            }
                        ],
                    }
                },
                opts=pulumi.ResourceOptions(parent=parent, depends_on=[*apis, binding]),
            )
    if sample_bigquery_jobs(settings):
        dataset = gcp.bigquery.Dataset(
            f"{name}-sample-dataset",
            project=settings.project,
            dataset_id=settings.names.sample_dataset_id(),
            location=settings.region,
            description="Rows the sample BigQuery jobs append: one per scheduled run.",
            # Sample rows only; kept, they would block `pulumi destroy`.
            delete_contents_on_destroy=True,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=apis),
        )
        created[f"{settings.project}.{settings.names.sample_dataset_id()}"] = dataset
    return SampleTargets(created=created, grants=grants)
