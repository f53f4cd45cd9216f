"""`samples: true` adds the sample jobs after a stack's own; without it a stack deploys only its
own jobs, and none of what the samples use (the sample workflow, the token check, the dataset)."""

from __future__ import annotations

from infra.plan.needs import needs_token_check
from infra.samples.targets import sample_bigquery_jobs
from infra.settings.samples import SAMPLE_JOB_NAMES
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tools.mocked_program import mock_stack

WORKFLOW = "gcp:workflows/workflow:Workflow"
DATASET = "gcp:bigquery/dataset:Dataset"


def test_samples_come_after_the_stacks_own_jobs() -> None:
    settings = build(valid_values(samples=True))
    names = [job.name for job in settings.jobs]
    assert names[0] == "every-5" and set(names[1:]) == SAMPLE_JOB_NAMES
    assert settings.sample_workflow_jobs() and sample_bigquery_jobs(settings) and needs_token_check(settings)


def test_without_samples_a_stack_is_its_own_jobs_only() -> None:
    settings = build(valid_values())
    assert [job.name for job in settings.jobs] == ["every-5"]
    assert not settings.sample_workflow_jobs() and not sample_bigquery_jobs(settings)
    resources = mock_stack(settings).resources
    assert not [r for r in resources if r.type in (WORKFLOW, DATASET)]


def test_with_samples_the_stack_deploys_what_they_use() -> None:
    resources = mock_stack(build(valid_values(samples=True))).resources
    assert {WORKFLOW, DATASET} <= {r.type for r in resources}


def test_a_job_named_like_a_sample_is_refused_naming_its_own_key() -> None:
    message = error_of(valid_values(samples=True, jobs=[valid_job(name="bigquery-demo")]))
    assert f"{NAMESPACE}:jobs[0].name: 'bigquery-demo' is the name of a sample job (samples: true)" in message
