"""`samples: true` adds the sample jobs after a stack's own; without it a stack deploys only its
own jobs, and none of what the samples use (the sample workflow, the token check, the dataset).
What each target kind's sample deploys is tested with the kinds (tests/infra/targets/)."""

from __future__ import annotations

from infra.plan.needs import needs_token_check
from infra.settings.samples import SAMPLE_JOB_NAMES
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tools.mocked_program import mock_stack

WORKFLOW = "gcp:workflows/workflow:Workflow"
DATASET = "gcp:bigquery/dataset:Dataset"


def test_samples_come_after_the_stacks_own_jobs() -> None:
    settings = build(valid_values(samples=True))
    names = [job.name for job in settings.jobs]
    assert names[0] == "every-5" and set(names[1:]) == SAMPLE_JOB_NAMES


def test_without_samples_a_stack_is_its_own_jobs_only() -> None:
    settings = build(valid_values())
    assert [job.name for job in settings.jobs] == ["every-5"]
    assert not settings.sample_workflow_jobs() and not needs_token_check(settings)
    resources = mock_stack(settings).resources
    assert not [r for r in resources if r.type in (WORKFLOW, DATASET)]


def test_a_job_named_like_a_sample_is_refused_naming_its_own_key() -> None:
    message = error_of(valid_values(samples=True, jobs=[valid_job(name="demo-every-15-minutes")]))
    assert (
        f"{NAMESPACE}:jobs[0].name: 'demo-every-15-minutes' is the name of a sample job (samples: true)"
        in message
    )
