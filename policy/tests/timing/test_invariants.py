"""The timing of each Scheduler job against its function (timing/): which function a job
calls, and scheduler-timing-invariants and -advisories across the pair."""

from __future__ import annotations

import dataclasses

import pulumi
import pytest
from pulumi_policy import EnforcementLevel, PolicyResource

from ...scheduler_guardrails.engine.types import BUCKET_OBJECT
from ...scheduler_guardrails.offline import (
    UNKNOWN_NUMBER,
    UNKNOWN_STRING,
    Reported,
    run_stack_policy,
    stack_policy,
    stack_resource,
)
from ...scheduler_guardrails.policies import FUNCTION_V2, SCHEDULER_JOB
from ...scheduler_guardrails.rules.timing import rules as timing
from ...scheduler_guardrails.timing.invariants import RULES_NEEDING_THE_TABLE
from ...scheduler_guardrails.timing.reading import TABLE_FIELDS
from .. import fixtures


def invariants(resources: list[PolicyResource]) -> Reported:
    return run_stack_policy(stack_policy("scheduler-timing-invariants"), resources)


def advisories(resources: list[PolicyResource]) -> Reported:
    return run_stack_policy(stack_policy("scheduler-timing-advisories"), resources)


def test_levels_are_split_between_the_two_timing_policies() -> None:
    assert stack_policy("scheduler-timing-invariants").enforcement_level == EnforcementLevel.MANDATORY
    assert stack_policy("scheduler-timing-advisories").enforcement_level == EnforcementLevel.ADVISORY
    assert stack_policy("runs-collection-ttl").enforcement_level == EnforcementLevel.MANDATORY


def test_dev_like_timing_passes_both_levels() -> None:
    resources = fixtures.stack(field=fixtures.ttl_field())
    assert invariants(resources).violations == []
    assert advisories(resources).violations == []


def test_a_time_limit_reaching_the_timeout_is_reported_on_the_job() -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["JOB_TIME_LIMIT_SECONDS"] = "58"
    resources = fixtures.stack(function=function)
    violations = invariants(resources).violations
    assert [urn for _, urn in violations] == [resources[1].urn]
    [message] = [m for m, _ in violations]
    assert "[time-limit-before-timeout]" in message
    assert "serviceConfig.timeoutSeconds" in message
    assert "Fix: keep JOB_TIME_LIMIT_SECONDS and each job table entry's time_limit_seconds" in message


def test_a_jobs_own_time_limit_is_read_from_the_job_table_by_its_name() -> None:
    """One function, a job with a limit of its own: that limit is the one judged."""
    job = fixtures.job()
    table = fixtures.table_of({job["name"]: {"time_limit_seconds": 20}})
    # Its attempt deadline still waits for the whole function: an advisory about the job's own limit.
    [message] = advisories(fixtures.stack(job=job, table=table)).messages
    assert "[deadline-matches-timeout]" in message and "time limit + 5s = 25s" in message
    assert "the job table's jobs[<job>].time_limit_seconds" in message
    job["attemptDeadline"] = "25s"
    assert advisories(fixtures.stack(job=job, table=table)).violations == []
    beyond = fixtures.table_of({job["name"]: {"time_limit_seconds": 58}})  # beyond the 60 s timeout less 5 s
    [message] = invariants(fixtures.stack(job=job, table=beyond)).messages
    assert "[time-limit-before-timeout]" in message and "the job's time limit 58s" in message
    [message] = invariants(fixtures.stack(job=job, table="{not json")).messages
    assert "job_table.json in function 'eos-function''s source (JOB_TABLE): (file): not JSON" in message
    # A table the pack cannot read yet (a first preview): the job's own limit is not judged, so
    # its deadline (right for its own 20 s) is not held to the function's limit either.
    assert invariants(fixtures.stack(job=job, table_unknown=True)).violations == []
    [message] = advisories(fixtures.stack(job=job, table_unknown=True)).messages
    assert "were not judged" in message and "[deadline-matches-timeout]" not in message


def test_a_table_the_source_does_not_hold_is_reported() -> None:
    """JOB_TABLE names a file the archive lacks: the function would refuse to start."""
    function, source = fixtures.stack(table="{}")[0], fixtures.source_object(None)
    source["source"] = pulumi.AssetArchive({"main.py": pulumi.StringAsset("")})
    resources = [function, *fixtures.stack(table="{}")[1:2], stack_resource(BUCKET_OBJECT, "zip", source)]
    [message] = invariants(resources).messages
    assert "JOB_TABLE='job_table.json', but its source archive holds no job_table.json" in message


def test_a_lease_too_short_to_renew_is_reported() -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["LEASE_SECONDS"] = "6"
    [message] = invariants(fixtures.stack(function=function)).messages
    assert "[lease-renewable]" in message and "LEASE_SECONDS" in message


def test_retries_that_end_inside_the_lease_lose_the_run() -> None:
    job = fixtures.job()
    job["retryConfig"]["retryCount"] = 2  # retries at 10 s and 30 s, lease 30 s
    [message] = invariants(fixtures.stack(job=job)).messages
    assert "[retry-outlives-lease]" in message and "the run would be lost" in message
    assert "Job.retryConfig.retryCount" in message


def test_retention_shorter_than_retry_window_is_reported() -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["RETENTION_SECONDS"] = "300"
    [message] = invariants(fixtures.stack(function=function)).messages
    latest = timing.latest_retry_arrival_seconds(
        timing.RetryConfig(retry_count=5, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3),
        60,
    )
    assert "[retention-outlives-retries]" in message and f"({latest:g}s after" in message
    assert "RETENTION_SECONDS" in message


def test_deadline_far_from_timeout_is_advisory_only() -> None:
    job = fixtures.job()
    job["attemptDeadline"] = "120s"
    job["schedule"] = "0 * * * *"  # hourly: the longer retries still fit between runs
    resources = fixtures.stack(job=job)
    [message] = advisories(resources).messages
    assert "[deadline-matches-timeout]" in message and "Fix: set attemptDeadline" in message
    assert invariants(resources).violations == []


def test_engine_float_numbers_and_fractional_durations_are_read() -> None:
    job = fixtures.job()
    job["attemptDeadline"] = "62.5s"  # within the 5 s tolerance of the 60 s timeout
    job["retryConfig"]["minBackoffDuration"] = "10.0s"
    resources = fixtures.stack(job=job)
    assert invariants(resources).violations == []
    assert advisories(resources).violations == []


def test_defaults_apply_when_retry_config_is_left_out() -> None:
    job = fixtures.job()
    del job["retryConfig"]  # Cloud Scheduler default: no retries, so a crash loses the run
    [message] = invariants(fixtures.stack(job=job)).messages
    assert "[retry-outlives-lease]" in message and "no retries" in message


def test_missing_or_bad_lease_and_durations_are_reported() -> None:
    function = fixtures.function()
    del function["serviceConfig"]["environmentVariables"]["LEASE_SECONDS"]
    job = fixtures.job()
    job["retryConfig"]["maxBackoffDuration"] = "5 minutes"
    messages = invariants(fixtures.stack(job=job, function=function)).messages
    assert len(messages) == 2
    assert any("retryConfig.maxBackoffDuration '5 minutes' is not a duration" in m for m in messages)
    assert any("LEASE_SECONDS is not set; set it explicitly" in m for m in messages)


def test_rules_reported_per_resource_are_not_repeated_by_the_stack() -> None:
    job = fixtures.job()
    job["schedule"] = "every 5 minutes"
    assert invariants(fixtures.stack(job=job)).violations == []


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("job", "attemptDeadline"),
        ("job", "retryConfig"),
        ("retry", "retryCount"),
        ("retry", "minBackoffDuration"),
        ("service", "timeoutSeconds"),
        ("env", "LEASE_SECONDS"),
        ("env", "JOB_TIME_LIMIT_SECONDS"),
        ("env", "RETENTION_SECONDS"),
    ],
)
def test_unknown_timing_input_skips_the_job(where: str, key: str) -> None:
    # Broken lease: a known value here would be reported; an unknown input must silence it.
    job, function = fixtures.job(), fixtures.function()
    function["serviceConfig"]["environmentVariables"]["LEASE_SECONDS"] = "6"
    unknown = UNKNOWN_NUMBER if key in ("retryCount", "timeoutSeconds") else UNKNOWN_STRING
    target = {
        "job": job,
        "retry": job["retryConfig"],
        "service": function["serviceConfig"],
        "env": function["serviceConfig"]["environmentVariables"],
    }[where]
    target[key] = unknown
    resources = fixtures.stack(job=job, function=function)
    assert invariants(resources).violations == []
    assert advisories(resources).violations == []


# --- which function a job calls -------------------------------------------------------------


def test_unknown_uri_still_pairs_a_lone_function() -> None:
    job = fixtures.job()
    job["httpTarget"]["uri"] = UNKNOWN_STRING
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["LEASE_SECONDS"] = "6"
    [message] = invariants(fixtures.stack(job=job, function=function)).messages
    assert "[lease-renewable]" in message


def test_job_is_paired_with_the_function_its_uri_names() -> None:
    slow = fixtures.function()
    slow["url"] = slow["serviceConfig"]["uri"] = "https://slow-xyz-uc.a.run.app"
    slow["serviceConfig"]["timeoutSeconds"] = 30  # would end before the 55 s time limit
    resources = [
        stack_resource(FUNCTION_V2, "slow", slow),
        stack_resource(FUNCTION_V2, "eos-function", fixtures.function()),
        stack_resource(SCHEDULER_JOB, "eos-job-demo", fixtures.job()),
    ]
    assert invariants(resources).violations == []
    assert advisories(resources).violations == []


def test_job_that_cannot_be_paired_is_an_advisory() -> None:
    job = fixtures.job()
    job["httpTarget"]["uri"] = "https://elsewhere.example.com/run"
    functions = []
    for name in ("a", "b"):
        function = fixtures.function()
        function["url"] = function["serviceConfig"]["uri"] = f"https://{name}-xyz-uc.a.run.app"
        functions.append(stack_resource(FUNCTION_V2, name, function))
    resources = [*functions, stack_resource(SCHEDULER_JOB, "eos-job-demo", job)]
    assert invariants(resources).violations == []
    [message] = advisories(resources).messages
    assert "cannot tell which of 2 functions" in message and "httpTarget.uri" in message


def test_timing_pairs_jobs_with_the_dedup_function_not_the_token_check() -> None:
    job = fixtures.job()
    job["httpTarget"]["uri"] = job["httpTarget"]["oidcToken"]["audience"] = UNKNOWN_STRING
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", fixtures.function()),
        stack_resource(FUNCTION_V2, "eos-token-check", fixtures.token_check()),
        stack_resource(SCHEDULER_JOB, "eos-job-demo", job),
    ]
    for name in ("scheduler-timing-invariants", "scheduler-timing-advisories"):
        assert run_stack_policy(stack_policy(name), resources).violations == []


# --- advisories about the schedule ----------------------------------------------------------


def test_retries_outlasting_the_schedule_interval_are_advisory_only() -> None:
    job = fixtures.job()
    job["schedule"] = "*/5 * * * *"  # retries can go on for 670 s
    resources = fixtures.stack(job=job)
    [message] = advisories(resources).messages
    assert "[retries-fit-schedule]" in message and "longer than the 300s between scheduled runs" in message
    assert "Fix: schedule the job less often" in message
    assert invariants(resources).violations == []


def test_a_jobs_starting_deadline_is_read_from_the_job_table_by_its_name() -> None:
    job = fixtures.job()

    def deadline(name: str, seconds: object) -> str:
        return fixtures.table_of({name: {"starting_deadline_seconds": seconds}})

    resources = fixtures.stack(job=job, table=deadline(job["name"], 3600))
    assert invariants(resources).violations == [] and advisories(resources).violations == []
    [message] = invariants(fixtures.stack(job=job, table=deadline(job["name"], 5))).messages
    assert "[starting-deadline-range]" in message and "starting deadline 5s" in message
    assert "the job table's jobs[<job>].starting_deadline_seconds" in message
    # Not this job's.
    assert invariants(fixtures.stack(job=job, table=deadline("another-job", 5))).violations == []
    [message] = invariants(fixtures.stack(job=job, table=deadline(job["name"], [5]))).messages
    assert "starting_deadline_seconds: [5] must be a number of seconds above 0" in message


def test_the_gap_between_runs_is_read_in_the_jobs_time_zone() -> None:
    """Every two hours with one retry an hour later: fine in UTC; in Europe/London the spring-forward
    day puts two runs an hour apart, and the retry lands on the next run."""
    job = fixtures.job()
    job["schedule"] = "0 */2 * * *"
    job["retryConfig"].update(retryCount=1, minBackoffDuration="3600s", maxBackoffDuration="3600s")
    assert invariants(fixtures.stack(job=job)).violations == []
    job["timeZone"] = "Europe/London"
    [message] = invariants(fixtures.stack(job=job)).messages
    assert "[retry-outlives-lease]" in message
    assert (
        "before the next scheduled run 3600s later, as Europe/London's clocks go forward between the runs "
        "at 2028-03-26 00:00 GMT and 02:00 BST"
    ) in message
    job["timeZone"] = UNKNOWN_STRING  # unknown in preview: judged on the update
    assert invariants(fixtures.stack(job=job)).violations == []


# --- a first preview: the job table is not known yet -----------------------------------------


def test_with_the_job_table_unknown_the_rules_that_need_no_table_are_still_judged() -> None:
    """A first preview cannot read the table the function's source ships (the archive is not
    known yet), but the lease, the retries and the retention are the function's and the job's
    own properties: a broken one is reported all the same."""
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["LEASE_SECONDS"] = "6"
    function["serviceConfig"]["environmentVariables"]["RETENTION_SECONDS"] = "300"
    job = fixtures.job()
    job["schedule"] = "*/5 * * * *"  # retries can go on for 670 s
    resources = fixtures.stack(job=job, function=function, table_unknown=True)
    rules = [message.split("[")[1].split("]")[0] for message in invariants(resources).messages]
    assert rules == ["lease-renewable", "retention-outlives-retries"]
    assert any("[retries-fit-schedule]" in message for message in advisories(resources).messages)


def test_with_the_job_table_unknown_the_pack_says_which_rules_it_could_not_judge() -> None:
    """Once per function, whose table it is, naming its jobs and the rules; none with the table."""
    function = fixtures.with_table(fixtures.function())
    fn = stack_resource(FUNCTION_V2, "eos-function", function)
    resources = [
        fn,
        *(
            stack_resource(SCHEDULER_JOB, f"eos-job-{name}", fixtures.job() | {"name": name}, [fn])
            for name in ("demo", "nightly")
        ),
        stack_resource(BUCKET_OBJECT, "eos-source-zip", fixtures.source_object(None)),
    ]
    assert invariants(resources).violations == []
    [(message, urn)] = advisories(resources).violations
    assert urn == fn.urn
    assert message == (
        "function 'eos-function': the job table its source ships (JOB_TABLE) is not known yet, as in a "
        "first preview, so for its Scheduler jobs 'eos-job-demo', 'eos-job-nightly' the rules that read "
        "a job's own time limit and starting deadline from it were not judged: time-limit-before-timeout, "
        "deadline-matches-timeout, starting-deadline-range, starting-deadline-admits-retries, "
        "starting-deadline-crash-recovery. Every other timing rule was judged; these are judged on the "
        "update, once the table is known."
    )
    assert advisories(fixtures.stack(table=fixtures.table_of({}))).violations == []


def test_the_rules_said_to_need_the_table_are_those_that_read_what_it_holds() -> None:
    """Each rule of rules/timing/rules.py that names a value the table holds (a job's own time
    limit or starting deadline) among its fields is one the pack names as not judged without
    the table, and no other: broken one at a time, every such rule is seen."""
    base = timing.JobTiming(
        schedule="0 3 * * *",
        attempt_deadline_seconds=60,
        function_timeout_seconds=60,
        lease_seconds=30,
        retention_seconds=86400,
        retry=timing.RetryConfig(
            retry_count=5, min_backoff_seconds=15, max_backoff_seconds=300, max_doublings=3
        ),
    )
    broken = [
        dataclasses.replace(base, time_limit_seconds=58),
        dataclasses.replace(base, attempt_deadline_seconds=120),
        dataclasses.replace(base, starting_deadline_seconds=5),
        dataclasses.replace(base, starting_deadline_seconds=12),
        dataclasses.replace(base, starting_deadline_seconds=20),
        dataclasses.replace(base, lease_seconds=6, retention_seconds=60, function_timeout_seconds=0),
    ]
    reading = {
        violation.rule
        for job in broken
        for violation in timing.check_job_timing(job)
        if set(violation.fields) & set(TABLE_FIELDS)
    }
    assert reading == set(RULES_NEEDING_THE_TABLE)
