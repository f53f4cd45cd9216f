"""`jobs[].startingDeadlineSeconds`: validated by key, judged against the job's retries, and
carried to the function in its job table."""

from __future__ import annotations

import pytest

from exactly_once.config import FunctionConfig
from infra.settings.environment import job_table
from infra.settings.timing_checks import timing_advisories, timing_errors
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tests.support.stack_tables import shipped_table, stack_function_env
from tools.mocked_program import run_mocked_stack

KEY = f"{NAMESPACE}:jobs[0].startingDeadlineSeconds"


def test_a_deadline_reaches_the_function_by_the_deployed_job_id() -> None:
    settings = build(valid_values(jobs=[valid_job(startingDeadlineSeconds=600), valid_job(name="other")]))
    timed, other = settings.jobs
    assert (timed.starting_deadline_seconds, other.starting_deadline_seconds) == (600, None)
    assert timing_errors(settings) == [] and timing_advisories(settings) == []
    table = job_table(settings)
    assert table.jobs[settings.scheduler_job_id(timed)].starting_deadline_seconds == 600
    config = FunctionConfig.from_env(stack_function_env(settings))
    deadlines = {job: policy.starting_deadline_seconds for job, policy in config.jobs.items()}
    assert {job: seconds for job, seconds in deadlines.items() if seconds is not None} == {
        settings.scheduler_job_id(timed): 600.0
    }
    # What the program ships: the same entries, and the audit job's (which the program adds).
    deployed = shipped_table(run_mocked_stack(settings))
    assert {job: deployed.jobs[job] for job in table.jobs} == table.jobs


def test_without_a_deadline_the_function_gets_none() -> None:
    table = job_table(build(valid_values()))
    assert all(policy.starting_deadline_seconds is None for policy in table.jobs.values())
    deployed = FunctionConfig.from_env(stack_function_env(build(valid_values())))
    assert all(policy.starting_deadline_seconds is None for policy in deployed.jobs.values())


@pytest.mark.parametrize("value", ["10m", True, None, [60]])
def test_a_deadline_must_be_a_number(value: object) -> None:
    assert f"{KEY}: expected a number, got {value!r}" in error_of(
        valid_values(jobs=[valid_job(startingDeadlineSeconds=value)])
    )


@pytest.mark.parametrize("value", [0, -5, 9.5, float("inf"), float("nan")])
def test_a_deadline_shorter_than_a_dispatch_or_not_finite_is_refused_naming_the_key(value: float) -> None:
    message = error_of(valid_values(jobs=[valid_job(startingDeadlineSeconds=value)]))
    (line,) = [line for line in message.splitlines() if "starting deadline" in line]
    assert line.startswith(f"  - {KEY}: job 'every-5': starting deadline {value:g}s must be a finite")
    assert "at least 10s" in line


def test_a_deadline_before_the_first_retry_is_refused_naming_the_retry_keys() -> None:
    # The first retry comes 20 s after the first attempt at the earliest: every one would be late.
    job = valid_job(
        startingDeadlineSeconds=12,
        retry={"retryCount": 3, "minBackoffSeconds": 20, "maxBackoffSeconds": 300, "maxDoublings": 3},
    )
    message = error_of(valid_values(jobs=[job]))
    (line,) = [line for line in message.splitlines() if "starting deadline" in line]
    assert line.startswith(
        f"  - {KEY}, {NAMESPACE}:jobs[0].retry.retryCount, {NAMESPACE}:jobs[0].retry.minBackoffSeconds: "
        "job 'every-5': starting deadline 12s ends before the first retry can arrive (20s after the first "
        "attempt)"
    ), line
    assert line.endswith("a run whose first attempt fails would never run; allow at least the first backoff")


def test_a_deadline_before_a_crashed_attempt_can_be_taken_over_is_an_advisory() -> None:
    # Retries at 10, 30, 70 ... s; the 30 s lease ends before the one at 30 s takes the run over.
    settings = build(valid_values(jobs=[valid_job(startingDeadlineSeconds=20)]))
    assert timing_errors(settings) == []
    (advisory,) = [a for a in timing_advisories(settings) if "starting deadline" in a]
    assert advisory.startswith(f"{KEY}, {NAMESPACE}:leaseSeconds: job 'every-5': starting deadline 20s")
    assert "(30s after the first attempt)" in advisory and "skipped as late" in advisory
    assert [
        a
        for a in timing_advisories(build(valid_values(jobs=[valid_job(startingDeadlineSeconds=30)])))
        if "starting deadline" in a
    ] == []
