"""What `samples: true` deploys for the template's target kinds: a sample workflow (and the
token check it calls) and a BigQuery dataset the sample query appends to."""

from __future__ import annotations

from infra.plan.needs import needs_token_check
from infra.samples.targets import sample_bigquery_jobs
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tools.mocked_program import mock_stack

WORKFLOW = "gcp:workflows/workflow:Workflow"
DATASET = "gcp:bigquery/dataset:Dataset"


def test_the_kinds_samples_are_among_the_sample_jobs() -> None:
    settings = build(valid_values(samples=True))
    assert settings.sample_workflow_jobs() and sample_bigquery_jobs(settings) and needs_token_check(settings)


def test_with_samples_the_stack_deploys_what_they_use() -> None:
    resources = mock_stack(build(valid_values(samples=True))).resources
    assert {WORKFLOW, DATASET} <= {r.type for r in resources}


def test_a_job_named_like_a_kinds_sample_is_refused() -> None:
    message = error_of(valid_values(samples=True, jobs=[valid_job(name="bigquery-demo")]))
    assert f"{NAMESPACE}:jobs[0].name: 'bigquery-demo' is the name of a sample job (samples: true)" in message
