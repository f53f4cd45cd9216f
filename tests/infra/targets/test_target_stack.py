"""Cloud Run job and BigQuery targets, stack side, under Pulumi's mocks: what the function is
told, what the runtime account is granted (on the job and the datasets only), that the
Scheduler jobs still call the function, and that the whole passes the policy pack."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from policy.scheduler_guardrails.offline import violations
from policy.scheduler_guardrails.rules.targets.bigquery import BIGQUERY_HANDLER
from policy.scheduler_guardrails.rules.targets.cloud_run_job import CLOUD_RUN_HANDLER
from tests.infra.conftest import PROJECT, REGION, build, valid_job, valid_values
from tests.support.stack_tables import shipped_table, table_handlers
from tools.mocked_program import MockedStack, mock_stack

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
SCHEDULER_JOB = "gcp:cloudscheduler/job:Job"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
JOB_MEMBER = "gcp:cloudrunv2/jobIamMember:JobIamMember"
DATASET_MEMBER = "gcp:bigquery/datasetIamMember:DatasetIamMember"
SECRET_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"
TOPIC_MEMBER = "gcp:pubsub/topicIAMMember:TopicIAMMember"
CLOUD_RUN_JOB = "gcp:cloudrunv2/job:Job"
SERVICE = "gcp:projects/service:Service"
EXPORT_JOB = f"projects/{PROJECT}/locations/{REGION}/jobs/nightly-export"
QUERY = "INSERT INTO `acme-data.reports.daily` SELECT @schedule_time, COUNT(*) FROM `acme-data.sales.orders`"


def values() -> dict[str, Any]:
    return valid_values(
        jobs=[
            valid_job(
                name="export", cloudRunJob={"job": "nightly-export", "args": ["--day"], "taskCount": 2}
            ),
            valid_job(
                name="rollup",
                schedule="0 * * * *",
                bigquery={
                    "query": QUERY,
                    "location": "EU",
                    "readDatasets": ["acme-data.sales"],
                    "writeDatasets": ["acme-data.reports"],
                },
                secrets={"WAREHOUSE_PASSWORD": "warehouse-password"},
                grants=[{"role": "roles/pubsub.publisher", "topic": f"projects/{PROJECT}/topics/rollups"}],
                env={"ROLLUP_REGION": "eu"},
            ),
        ]
    )


@pytest.fixture(scope="module")
def stack() -> MockedStack:
    return mock_stack(build(values()))


def function_env(stack: MockedStack) -> dict[str, str]:
    (function,) = [
        f for f in stack.of_type(FUNCTION) if f.inputs["buildConfig"]["entryPoint"] == "handle_scheduled_job"
    ]
    return dict(function.inputs["serviceConfig"]["environmentVariables"])


def roles_of(stack: MockedStack, type_: str) -> set[tuple[str, str]]:
    keys = {JOB_MEMBER: "name", DATASET_MEMBER: "datasetId", SECRET_MEMBER: "secretId", TOPIC_MEMBER: "topic"}
    return {(r.inputs[keys[type_]], r.inputs["role"]) for r in stack.of_type(type_)}


def test_the_function_is_told_what_each_job_starts(stack: MockedStack) -> None:
    env = function_env(stack)
    handlers = table_handlers(shipped_table(stack.resources))
    assert handlers["eos-prod_export"] == CLOUD_RUN_HANDLER
    assert handlers["eos-prod_rollup"] == BIGQUERY_HANDLER
    assert json.loads(env["CLOUD_RUN_JOBS"]) == {
        "eos-prod_export": {"job": EXPORT_JOB, "args": ["--day"], "taskCount": 2}
    }
    assert json.loads(env["BIGQUERY_JOBS"]) == {
        "eos-prod_rollup": {"project": PROJECT, "location": "EU", "query": QUERY}
    }
    assert env["ROLLUP_REGION"] == "eu" and "WAREHOUSE_PASSWORD" not in env


def test_the_runtime_account_may_run_that_cloud_run_job_only(stack: MockedStack) -> None:
    assert roles_of(stack, JOB_MEMBER) == {
        ("nightly-export", "roles/run.jobsExecutorWithOverrides"),
        ("nightly-export", "roles/run.viewer"),
    }
    (grant, _) = stack.of_type(JOB_MEMBER)
    assert (grant.inputs["project"], grant.inputs["location"]) == (PROJECT, REGION)
    project_roles = {r.inputs["role"] for r in stack.of_type(PROJECT_MEMBER)}
    assert not {role for role in project_roles if role.startswith("roles/run.")}
    runtime = stack.named("gcp:serviceaccount/account:Account", "eos-runtime").outputs["email"]
    assert all(g.inputs["member"] == f"serviceAccount:{runtime}" for g in stack.of_type(JOB_MEMBER))


def test_bigquery_gets_job_creation_on_the_project_and_data_per_dataset(stack: MockedStack) -> None:
    project_roles = {r.inputs["role"] for r in stack.of_type(PROJECT_MEMBER)}
    assert "roles/bigquery.jobUser" in project_roles
    assert not {
        role
        for role in project_roles
        if role.startswith("roles/bigquery.") and role != "roles/bigquery.jobUser"
    }
    assert roles_of(stack, DATASET_MEMBER) == {
        ("sales", "roles/bigquery.dataViewer"),
        ("reports", "roles/bigquery.dataEditor"),
    }
    assert {r.inputs["project"] for r in stack.of_type(DATASET_MEMBER)} == {"acme-data"}
    assert {r.inputs["service"] for r in stack.of_type(SERVICE)} >= {
        "bigquery.googleapis.com",
        "secretmanager.googleapis.com",
    }


def test_secrets_are_references_granted_on_the_secret_and_waited_for(stack: MockedStack) -> None:
    (function,) = [
        f for f in stack.of_type(FUNCTION) if f.inputs["buildConfig"]["entryPoint"] == "handle_scheduled_job"
    ]
    assert function.inputs["serviceConfig"]["secretEnvironmentVariables"] == [
        {
            "key": "WAREHOUSE_PASSWORD",
            "projectId": PROJECT,
            "secret": "warehouse-password",
            "version": "latest",
        }
    ]
    assert roles_of(stack, SECRET_MEMBER) == {("warehouse-password", "roles/secretmanager.secretAccessor")}
    (secret_grant,) = stack.of_type(SECRET_MEMBER)
    assert secret_grant.urn in stack.waits_for(function.urn)
    assert stack.pauses_before(function.urn, at_least=60)
    assert roles_of(stack, TOPIC_MEMBER) == {("rollups", "roles/pubsub.publisher")}


def test_the_scheduler_jobs_call_the_function_never_the_apis(stack: MockedStack) -> None:
    function_uri = stack.component_outputs["functionUri"]
    jobs = {r.inputs["name"]: r.inputs["httpTarget"] for r in stack.of_type(SCHEDULER_JOB)}
    for name in ("eos-prod_export", "eos-prod_rollup"):
        assert jobs[name]["uri"] == function_uri
        assert "googleapis.com" not in jobs[name]["uri"]
        assert "body" not in jobs[name] or not base64.b64decode(jobs[name]["body"])


def test_the_stack_passes_every_policy(stack: MockedStack) -> None:
    resources = [(r.type, r.name, r.inputs, r.outputs) for r in stack.resources]
    assert violations(resources) == []


def test_sample_targets_deploy_a_cloud_run_job_and_a_dataset_and_pass_every_mandatory_policy() -> None:
    sampled = mock_stack(
        build(
            valid_values(
                jobs=[
                    valid_job(name="sample-job", cloudRunJob={"sample": True}),
                    valid_job(name="sample-query", schedule="0 * * * *", bigquery={"sample": True}),
                ]
            )
        )
    )
    (job,) = sampled.of_type(CLOUD_RUN_JOB)
    container = job.inputs["template"]["template"]["containers"][0]
    assert container["image"].startswith("docker.io/library/python:3.12")
    assert container["commands"][:2] == ["python3", "-c"] and "token_call" in container["commands"][2]
    assert roles_of(sampled, JOB_MEMBER) == {
        (job.inputs["name"], "roles/run.jobsExecutorWithOverrides"),
        (job.inputs["name"], "roles/run.viewer"),
    }
    (dataset,) = sampled.of_type("gcp:bigquery/dataset:Dataset")
    assert roles_of(sampled, DATASET_MEMBER) == {(dataset.inputs["datasetId"], "roles/bigquery.dataEditor")}
    found = violations([(r.type, r.name, r.inputs, r.outputs) for r in sampled.resources])
    # The token check must be reachable from a Cloud Run job outside any VPC network: the one
    # finding is the advisory ingress policy's, on that function.
    assert [v.split(" ", 1)[0] for v in found] == ["function-ingress-restricted"]
    assert "token-check" in found[0]
