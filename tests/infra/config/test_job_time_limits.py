"""One stack, one function, jobs of very different lengths: each job's own time limit."""

from __future__ import annotations

import re

import pytest
import yaml

from exactly_once.config import FunctionConfig
from infra.config.schema import REPO_ROOT
from infra.settings.environment import function_environment, job_table
from infra.settings.timing_checks import timing_advisories, timing_errors
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.timing import rules as timing
from tests.infra.conftest import DEMO_HANDLER, NAMESPACE, build, valid_job
from tests.support.stack_tables import stack_function_env
from tools.mocked_program import run_mocked_stack

RETRY = {"retryCount": 5, "minBackoffSeconds": 60, "maxBackoffSeconds": 3600, "maxDoublings": 4}


def short_and_long(**long_job: object) -> dict[str, object]:
    """A job every 5 minutes that may run a minute, beside a nightly job that may run 20."""
    return {
        "functionTimeoutSeconds": 1205,
        "retentionSeconds": 172800,
        "jobHandler": DEMO_HANDLER,
        "jobs": [
            valid_job(
                name="every-5",
                schedule="*/5 * * * *",
                timeLimitSeconds=55,
                retry={"retryCount": 2, "minBackoffSeconds": 35, "maxBackoffSeconds": 60, "maxDoublings": 1},
                attemptDeadlineSeconds=None,
            ),
            valid_job(
                name="nightly",
                schedule="0 3 * * *",
                retry=RETRY,
                **{"attemptDeadlineSeconds": None, **long_job},
            ),
        ],
    }


def without_none(values: dict[str, object]) -> dict[str, object]:
    jobs = [{k: v for k, v in job.items() if v is not None} for job in values["jobs"]]  # type: ignore[attr-defined]
    return {**values, "jobs": jobs}


def test_a_five_minute_job_and_a_twenty_minute_job_share_a_stack() -> None:
    settings = build(without_none(short_and_long(timeLimitSeconds=1200)))
    short, long = settings.jobs
    assert (settings.job_time_limit(short), settings.job_time_limit(long)) == (55, 1200)
    # Each job's attempt deadline follows its own limit, plus the 5 s in which its attempt ends.
    assert (short.attempt_deadline_seconds, long.attempt_deadline_seconds) == (60, 1205)
    assert timing_errors(settings) == [] and timing_advisories(settings) == []
    env = function_environment(settings)
    assert env["JOB_TIME_LIMIT_SECONDS"] == "1200"
    table = job_table(settings)
    assert {job: policy.time_limit_seconds for job, policy in table.jobs.items()} == {
        settings.scheduler_job_id(short): 55,
        settings.scheduler_job_id(long): None,  # named all the same: the function serves every job it names
    }
    # What the function reads from that environment and table: each job by its deployed id.
    config = FunctionConfig.from_env(stack_function_env(settings))
    assert config.time_limit_for(settings.scheduler_job_id(short)) == 55
    assert config.time_limit_for(settings.scheduler_job_id(long)) == 1200
    # And what the stack deploys: each Scheduler job waits as long as its own job may run.
    jobs = [r for r in run_mocked_stack(settings) if r.type == "gcp:cloudscheduler/job:Job"]
    deadlines = {r.inputs["name"]: r.inputs["attemptDeadline"] for r in jobs}
    assert deadlines[settings.scheduler_job_id(short)] == "60s"
    assert deadlines[settings.scheduler_job_id(long)] == "1205s"


def test_without_limits_of_their_own_the_function_timeout_is_every_jobs() -> None:
    settings = build(without_none({**short_and_long(), "jobs": [valid_job(attemptDeadlineSeconds=None)]}))
    (job,) = settings.jobs
    assert settings.job_time_limit(job) == 1200 and job.attempt_deadline_seconds == 1205
    assert all(policy.time_limit_seconds is None for policy in job_table(settings).jobs.values())


def test_a_limit_beyond_the_function_explains_why_in_one_sentence() -> None:
    with pytest.raises(SettingsError) as raised:
        build(without_none(short_and_long(timeLimitSeconds=1800)))
    (line,) = [line for line in str(raised.value).splitlines() if "time limit" in line]
    assert line.startswith(
        f"  - {NAMESPACE}:jobs[1].timeLimitSeconds, {NAMESPACE}:functionTimeoutSeconds: job 'nightly': "
        "the job's time limit 1800s must be positive and at most the function timeout 1205s less 5s (1200s): "
        "one function runs every job of a stack"
    ), line
    assert line.endswith("raise the function timeout (at most 3600s) or give the job a stack of its own")
    assert line.count(". ") == 0  # one sentence


@pytest.mark.parametrize(("value", "problem"), [(0, "must be positive"), ("long", "expected a number")])
def test_a_limit_must_be_a_positive_number(value: object, problem: str) -> None:
    with pytest.raises(SettingsError, match=rf"{NAMESPACE}:jobs\[1\]\.timeLimitSeconds.*{problem}"):
        build(without_none(short_and_long(timeLimitSeconds=value)))


def test_a_deadline_set_far_from_the_jobs_own_limit_is_an_advisory_naming_it() -> None:
    settings = build(without_none(short_and_long(timeLimitSeconds=1200, attemptDeadlineSeconds=300)))
    (advisory,) = timing_advisories(settings)
    assert advisory.startswith(
        f"{NAMESPACE}:jobs[1].attemptDeadlineSeconds, {NAMESPACE}:jobs[1].timeLimitSeconds: job 'nightly': "
        "attempt deadline 300s differs from how long an attempt may take, the job's time limit + 5s = 1205s"
    ), advisory


def test_the_example_of_docs_timing_md_is_a_valid_stack_without_advisories() -> None:
    text = (REPO_ROOT / "docs" / "timing.md").read_text(encoding="utf-8")
    section = text.split("## Short and long jobs in one stack", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None
    values = {
        key.removeprefix(f"{NAMESPACE}:"): value for key, value in yaml.safe_load(block.group(1)).items()
    }
    # The page is about timing: its jobs run whatever handler the stack names.
    settings = build({"jobHandler": DEMO_HANDLER, **values})
    short, nightly = settings.jobs
    assert (settings.job_time_limit(short), settings.job_time_limit(nightly)) == (55, 1200)
    assert timing_errors(settings) == [] and timing_advisories(settings) == []
    assert timing.retry_arrivals_if_every_attempt_fails_instantly(short.retry) == [35, 95]
