"""A stack with a second region passes the pack: each region's Scheduler jobs are judged against
the function they call (by URI, else by dependency), the pair of functions, repositories and
grants is what the pack allows, applied and as a first preview sees it."""

from __future__ import annotations

import pytest

from infra.settings.samples import SAMPLE_JOB_NAMES
from infra.settings.stack import StackSettings
from tests.infra.conftest import build, valid_job, valid_values
from tests.policy.stack_violations import judged_in_preview, stack_violations
from tools.mocked_program import MockedResource, run_mocked_stack

SECOND = "us-east1"


@pytest.fixture(scope="module")
def settings() -> StackSettings:
    # The sample jobs beside a plain one: each target kind present has its job in both regions.
    return build(valid_values(samples=True, secondRegion=SECOND, databaseLocation="nam5", jobs=[valid_job()]))


@pytest.fixture(scope="module")
def resources(settings: StackSettings) -> list[MockedResource]:
    return run_mocked_stack(settings)


def _jobs_per_region(settings: StackSettings) -> int:
    """The Scheduler jobs each region runs: the stack's jobs, and the audit's."""
    assert settings.missed_run_audit
    return len(settings.jobs) + 1


def test_both_regions_pass_every_policy_applied_and_in_preview(
    settings: StackSettings, resources: list[MockedResource]
) -> None:
    jobs = [r for r in resources if r.type == "gcp:cloudscheduler/job:Job"]
    functions = [r for r in resources if r.type == "gcp:cloudfunctionsv2/function:Function"]
    assert {job.name for job in settings.jobs} >= SAMPLE_JOB_NAMES
    # The pack had the pairs to look at: every job (the audit's too) and a function per region.
    assert sorted(job.inputs["region"] for job in jobs) == sorted(
        ["europe-west1", SECOND] * _jobs_per_region(settings)
    )
    assert {f.inputs["location"] for f in functions} >= {"europe-west1", SECOND}
    assert stack_violations(resources, preview=False) == []
    assert judged_in_preview(stack_violations(resources, preview=True)) == []


def test_a_second_region_job_that_breaks_its_timing_is_caught(
    settings: StackSettings, resources: list[MockedResource]
) -> None:
    """Guards the test above against passing because the second region's jobs went unchecked."""
    broken = []
    for r in resources:
        if r.type == "gcp:cloudscheduler/job:Job" and r.inputs["region"] == SECOND:
            # Stack policies read outputs: no retries, so a crashed attempt's run would be lost.
            retry = dict(r.outputs["retryConfig"]) | {"retryCount": 0}
            r = MockedResource(r.type, r.name, r.urn, r.inputs, dict(r.outputs) | {"retryConfig": retry})
        broken.append(r)
    found = [v for v in stack_violations(broken, preview=False) if "[retry-outlives-lease]" in v]
    # Each of the second region's jobs, and none of the first region's.
    assert len(found) == _jobs_per_region(settings)
    assert all(f"Scheduler job 'eos-{SECOND}-job-" in v for v in found)
