"""A job's optional workflow and the token check's settings: parsed, defaulted and refused
naming the key, like every other part of the stack config."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.plan.headers import headers_for
from infra.settings.environment import job_table, token_check_environment
from infra.settings.timing_checks import timing_advisories
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tests.support.stack_tables import table_handlers

EXISTING_WORKFLOW = "projects/p/locations/us-central1/workflows/w"


def uses_workflows(settings) -> bool:
    """Whether the stack deploys what starting executions needs (its APIs, the project role)."""
    from policy.scheduler_guardrails.rules.targets import workflow

    return workflow.KIND in settings.kinds_used()


def test_sample_workflow_job_defaults_its_handler_and_sends_the_workflow_body() -> None:
    from policy.scheduler_guardrails.rules.targets.workflow import WORKFLOWS_HANDLER, WorkflowTarget

    settings = build(valid_values(jobs=[valid_job(workflow={"sample": True, "argument": {"a": 1}})]))
    (job,) = settings.jobs
    assert job.target == WorkflowTarget(sample=True, name=None, argument={"a": 1})
    assert job.handler == WORKFLOWS_HANDLER and job.sample_workflow
    assert job.body is None and job.body_bytes() is None  # named only by the Pulumi program
    assert json.loads(job.body_bytes("projects/x/locations/y/workflows/z") or b"") == {
        "workflow": "projects/x/locations/y/workflows/z",
        "argument": {"a": 1},
    }
    assert headers_for(settings, job)["Content-Type"] == "application/json"
    assert uses_workflows(settings) and settings.sample_workflow_jobs() == (job,)
    assert table_handlers(job_table(settings)) == {"eos-prod_every-5": WORKFLOWS_HANDLER}


def test_existing_workflow_job_has_a_static_body() -> None:
    settings = build(valid_values(jobs=[valid_job(workflow={"name": EXISTING_WORKFLOW})]))
    (job,) = settings.jobs
    assert job.body == {"workflow": EXISTING_WORKFLOW}
    assert json.loads(job.body_bytes() or b"") == {"workflow": EXISTING_WORKFLOW}
    assert uses_workflows(settings) and settings.sample_workflow_jobs() == ()


def test_no_workflow_job_means_no_workflows() -> None:
    settings = build(valid_values())
    assert not uses_workflows(settings) and settings.sample_workflow_jobs() == ()


@pytest.mark.parametrize(
    ("job", "key", "text"),
    [
        (valid_job(workflow="yes"), "jobs[0].workflow", "expected an object"),
        (valid_job(workflow={}), "jobs[0].workflow", "set sample: true"),
        (valid_job(workflow={"sample": False}), "jobs[0].workflow", "set sample: true"),
        (valid_job(workflow={"sample": "yes"}), "jobs[0].workflow.sample", "expected true or false"),
        (
            valid_job(workflow={"sample": True, "name": EXISTING_WORKFLOW}),
            "jobs[0].workflow",
            "either sample: true or name",
        ),
        (valid_job(workflow={"name": "my-workflow"}), "jobs[0].workflow.name", "is not projects/"),
        (valid_job(workflow={"sample": True, "args": {}}), "jobs[0].workflow.args", "unknown workflow key"),
        (valid_job(workflow={"sample": True, "argument": [1]}), "jobs[0].workflow.argument", "JSON object"),
        (
            valid_job(workflow={"sample": True}, body={"x": 1}),
            "jobs[0].body",
            "put the workflow's input in jobs[0].workflow.argument",
        ),
        (
            valid_job(workflow={"sample": True}, handler="jobs.demo:run_demo_job"),
            "jobs[0].handler",
            "cannot start the job's workflow",
        ),
        (
            valid_job(handler="jobs.workflows:start_workflow_execution"),
            "jobs[0].body",
            "needs body.workflow",
        ),
        (
            valid_job(
                handler="jobs.workflows:start_workflow_execution",
                body={"workflow": EXISTING_WORKFLOW, "extra": 1},
            ),
            "jobs[0].body",
            "the Workflows proxy body is",
        ),
    ],
)
def test_workflow_settings_are_validated_naming_the_key(job: dict[str, Any], key: str, text: str) -> None:
    message = error_of(valid_values(jobs=[job]))
    assert f"{NAMESPACE}:{key}:" in message
    assert text in message


def test_default_handler_set_to_the_proxy_needs_workflow_bodies() -> None:
    message = error_of(valid_values(jobHandler="jobs.workflows:start_workflow_execution"))
    assert f"{NAMESPACE}:jobs[0].body" in message
    ok = valid_job(body={"workflow": EXISTING_WORKFLOW, "argument": {"a": 1}})
    assert uses_workflows(
        build(valid_values(jobHandler="jobs.workflows:start_workflow_execution", jobs=[ok]))
    )


def test_idempotency_settings_defaults_and_validation() -> None:
    settings = build(valid_values())
    assert settings.idempotency_collection == "idempotency_tokens"
    assert settings.idempotency_retention_seconds == 604800
    assert token_check_environment(settings)["IDEMPOTENCY_RETENTION_SECONDS"] == "604800"
    message = error_of(valid_values(idempotencyRetentionSeconds=3600))
    assert f"{NAMESPACE}:idempotencyRetentionSeconds, {NAMESPACE}:retentionSeconds" in message
    assert "3600s is shorter than the run retention 86400s" in message
    assert f"{NAMESPACE}:idempotencyCollection" in error_of(valid_values(idempotencyCollection="a/b"))
    message = error_of(valid_values(idempotencyCollection="scheduler_runs"))
    assert "also the runsCollection" in message


def test_short_function_timeout_with_the_workflows_proxy_is_advisory() -> None:
    job = valid_job(attemptDeadlineSeconds=20, workflow={"name": EXISTING_WORKFLOW})
    settings = build(valid_values(functionTimeoutSeconds=20, jobs=[job]))
    advisories = timing_advisories(settings)
    assert any(
        a.startswith(
            f"{NAMESPACE}:functionTimeoutSeconds: job 'every-5': 20s is shorter than the Workflows call"
        )
        and "at least 36" in a
        for a in advisories
    )
    plain = build(valid_values(functionTimeoutSeconds=20, jobs=[valid_job(attemptDeadlineSeconds=20)]))
    assert not any("Workflows" in a for a in timing_advisories(plain))
