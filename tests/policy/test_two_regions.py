"""A stack with a second region passes the pack: each region's Scheduler jobs are judged against
the function they call (by URI, else by dependency), the pair of functions, repositories and
grants is what the pack allows, applied and as a first preview sees it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from policy.offline import UNKNOWN_STRING, violations
from tests.infra.conftest import build, valid_job, valid_values
from tools.mocked_program import MockedResource, run_mocked_stack

SECOND = "us-east1"
# Values a fresh stack's preview cannot know: they come from resources not yet created.
_COMPUTED_KEYS = frozenset({"url", "uri", "audience", "serviceAccountEmail", "member", "email", "bucket"})


def _as_in_preview(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: UNKNOWN_STRING if k in _COMPUTED_KEYS else _as_in_preview(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_in_preview(v) for v in value]
    return value


@pytest.fixture(scope="module")
def resources() -> list[MockedResource]:
    settings = build(
        valid_values(
            secondRegion=SECOND,
            databaseLocation="nam5",
            jobs=[valid_job(), valid_job(name="wf", workflow={"sample": True})],
        )
    )
    return run_mocked_stack(settings)


def _violations(resources: list[MockedResource], preview: bool) -> list[str]:
    convert = _as_in_preview if preview else (lambda props: props)
    return violations((r.type, r.name, convert(r.inputs), convert(r.outputs)) for r in resources)


def test_both_regions_pass_every_policy_applied_and_in_preview(resources: list[MockedResource]) -> None:
    jobs = [r for r in resources if r.type == "gcp:cloudscheduler/job:Job"]
    functions = [r for r in resources if r.type == "gcp:cloudfunctionsv2/function:Function"]
    # The pack had the pairs to look at: three jobs (the audit's too) and a function per region.
    assert sorted(job.inputs["region"] for job in jobs) == sorted(["europe-west1", SECOND] * 3)
    assert {f.inputs["location"] for f in functions} >= {"europe-west1", SECOND}
    assert _violations(resources, preview=False) == []
    assert _violations(resources, preview=True) == []


def test_a_second_region_job_that_breaks_its_timing_is_caught(resources: list[MockedResource]) -> None:
    """Guards the test above against passing because the second region's jobs went unchecked."""
    broken = []
    for r in resources:
        if r.type == "gcp:cloudscheduler/job:Job" and r.inputs["region"] == SECOND:
            # Stack policies read outputs: no retries, so a crashed attempt's run would be lost.
            retry = dict(r.outputs["retryConfig"]) | {"retryCount": 0}
            r = MockedResource(r.type, r.name, r.urn, r.inputs, dict(r.outputs) | {"retryConfig": retry})
        broken.append(r)
    found = [v for v in _violations(broken, preview=False) if "[retry-outlives-lease]" in v]
    # Each of the second region's three jobs, and none of the first region's.
    assert len(found) == 3
    assert all(f"Scheduler job 'eos-{SECOND}-job-" in v for v in found)
