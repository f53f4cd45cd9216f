"""The audit's pure logic: DST-correct fire times, each run's state, back-to-back audit
intervals, and the AUDIT_JOBS contract between the stack and the job."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from exactly_once.audit.config import AuditConfig, AuditedJob, AuditError
from exactly_once.audit.missed_runs import (
    RunState,
    classify,
    expected_runs,
    fire_times,
    judge_runs,
    runs_whose_window_closed,
    stack_target,
)
from exactly_once.config import ConfigError
from exactly_once.delivery.scheduler_request import RunKey
from infra.plan.audit_job import (
    AUDIT_HANDLER,
    audit_environment,
    audited_jobs,
    retry_window_seconds,
    with_audit_job,
)
from infra.settings.environment import function_environment
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.timing.rules import check_job_timing, latest_retry_arrival_seconds
from tests.support.stacks import fixture_stack


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def test_fire_times_include_both_ends_of_the_window() -> None:
    times = fire_times("*/15 * * * *", "Etc/UTC", utc(2026, 3, 1, 10, 0), utc(2026, 3, 1, 10, 45))
    assert times == [utc(2026, 3, 1, 10, m) for m in (0, 15, 30, 45)]
    assert fire_times("*/15 * * * *", "Etc/UTC", utc(2026, 3, 1, 10, 1), utc(2026, 3, 1, 10, 14)) == []


def test_spring_forward_skips_the_missing_wall_time() -> None:
    # Europe/Berlin jumps from 02:00 to 03:00 on 2026-03-29: a 02:30 job does not fire that day.
    times = fire_times("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27), utc(2026, 3, 31))
    assert times == [utc(2026, 3, 27, 1, 30), utc(2026, 3, 28, 1, 30), utc(2026, 3, 30, 0, 30)]


def test_fall_back_fires_the_repeated_wall_time_once() -> None:
    # 2026-10-25 02:30 happens twice in Berlin (CEST, then CET): one run, at the first.
    times = fire_times("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert times == [utc(2026, 10, 25, 0, 30)]
    hourly = fire_times("0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23), utc(2026, 10, 25, 3))
    assert hourly == [utc(2026, 10, 24, 23), utc(2026, 10, 25, 0), utc(2026, 10, 25, 2), utc(2026, 10, 25, 3)]


@pytest.mark.parametrize(
    ("schedule", "zone", "problem"),
    [("*/15 * * *", "Etc/UTC", "unix-cron"), ("0 * * * *", "Mars/Olympus", "time zone")],
)
def test_bad_schedules_are_audit_errors(schedule: str, zone: str, problem: str) -> None:
    with pytest.raises(AuditError, match=problem):
        fire_times(schedule, zone, utc(2026, 1, 1), utc(2026, 1, 2))


def test_a_huge_window_is_refused() -> None:
    with pytest.raises(AuditError, match="narrow the window"):
        fire_times("* * * * *", "Etc/UTC", utc(2026, 1, 1), utc(2026, 3, 1))


@pytest.mark.parametrize(
    ("record", "now_after_close", "state"),
    [
        ({"status": "completed", "result": "succeeded"}, False, RunState.COMPLETED),
        ({"status": "completed", "result": "succeeded"}, True, RunState.COMPLETED),
        ({"status": "completed", "result": "terminal_failure"}, True, RunState.TERMINAL_FAILURE),
        ({"status": "in_progress"}, False, RunState.IN_PROGRESS),
        ({"status": "in_progress"}, True, RunState.MISSED),
        (None, False, RunState.PENDING),
        (None, True, RunState.MISSED),
    ],
)
def test_classify(record, now_after_close: bool, state: RunState) -> None:
    closes = utc(2026, 1, 1, 12)
    now = closes + timedelta(seconds=1) if now_after_close else closes - timedelta(seconds=1)
    assert classify(record, closes, now) is state


OURS = "eos-dev-handler/main.handle_scheduled_job"
THEIRS = "crm-handler/main.handle_scheduled_job"


@pytest.mark.parametrize("now_after_close", [False, True])
@pytest.mark.parametrize(
    ("record", "state"),
    [
        ({"status": "completed", "result": "succeeded", "target": THEIRS}, RunState.MISSED),
        ({"status": "completed", "result": "terminal_failure", "target": THEIRS}, RunState.MISSED),
        ({"status": "in_progress", "target": THEIRS}, RunState.MISSED),
        ({"status": "completed", "result": "succeeded", "target": OURS}, RunState.COMPLETED),
        # A record without a target is nobody else's, as for the function's claim.
        ({"status": "completed", "result": "succeeded", "target": None}, RunState.COMPLETED),
    ],
)
def test_a_run_recorded_by_another_target_is_missed_at_once(
    record, state: RunState, now_after_close: bool
) -> None:
    closes = utc(2026, 1, 1, 12)
    now = closes + timedelta(seconds=1) if now_after_close else closes - timedelta(seconds=1)
    assert classify(record, closes, now, OURS) is state
    # Without this stack's target, the record is judged by its status and window alone.
    assert classify(record, closes, now) is classify({**record, "target": None}, closes, now, OURS)


def test_the_stack_target_is_read_from_the_newest_own_run_recorded() -> None:
    newest, older, oldest = ("audit-3", "audit-2", "audit-1")
    asked: list[list[str]] = []

    def read(ids):
        asked.append(list(ids))
        return {
            older: {"status": "completed", "target": OURS},
            oldest: {"status": "completed", "target": "old"},
        }

    assert stack_target(read, [newest, older, oldest]) == OURS
    assert asked == [[newest, older, oldest]]  # one batched read
    assert stack_target(lambda ids: {newest: {"target": None}}, [newest]) is None
    assert stack_target(read, []) is None and len(asked) == 1


def test_a_run_of_another_target_says_which_target_recorded_it() -> None:
    job = AuditedJob("every-15", "*/15 * * * *", "Etc/UTC", 600)
    expected = expected_runs([job], since=utc(2026, 1, 1, 10), until=utc(2026, 1, 1, 10, 15))
    ours, theirs = (RunKey("p", "l", "every-15", utc(2026, 1, 1, 10, m)).run_id for m in (0, 15))
    records = {
        ours: {"status": "completed", "result": "succeeded", "target": OURS},
        theirs: {"status": "completed", "result": "succeeded", "target": THEIRS},
    }
    runs = judge_runs(
        expected,
        project="p",
        location="l",
        now=utc(2026, 1, 1, 10, 16),  # the 10:15 run's window is still open
        read_records=lambda ids: {i: records[i] for i in ids if i in records},
        target=OURS,
    )
    assert [(run.state, run.other_target) for run in runs] == [
        (RunState.COMPLETED, None),
        (RunState.MISSED, THEIRS),
    ]
    assert runs[1].detail.startswith(f"recorded by target {THEIRS}, not this stack's {OURS}")
    assert "wrong_target" in runs[1].detail


def test_judge_reads_records_by_run_id() -> None:
    job = AuditedJob("every-15", "*/15 * * * *", "Etc/UTC", 600)
    expected = expected_runs([job], since=utc(2026, 1, 1, 10), until=utc(2026, 1, 1, 10, 30))
    done = RunKey("p", "l", "every-15", utc(2026, 1, 1, 10, 15)).run_id
    asked: list[list[str]] = []

    def read(ids):
        asked.append(list(ids))
        return {done: {"status": "completed", "result": "succeeded"}}

    runs = judge_runs(expected, project="p", location="l", now=utc(2026, 1, 1, 10, 35), read_records=read)
    assert [(run.schedule_time.minute, run.state) for run in runs] == [
        (0, RunState.MISSED),
        (15, RunState.COMPLETED),
        (30, RunState.PENDING),  # its window closes at 10:40
    ]
    assert len(asked) == 1 and len(asked[0]) == 3  # one batched read


def test_consecutive_audit_intervals_judge_every_run_exactly_once() -> None:
    jobs = [
        AuditedJob("a", "*/7 * * * *", "Etc/UTC", 800),
        AuditedJob("b", "0 2 * * *", "Europe/Berlin", 3000),
    ]
    start = utc(2026, 3, 28)
    judged = []
    for hour in range(72):  # across the spring-forward night
        up_to = start + timedelta(hours=hour + 1)
        judged += runs_whose_window_closed(jobs, after=up_to - timedelta(hours=1), up_to=up_to)
    assert len(judged) == len(set(judged))
    covered = [
        (job, t)
        for job in jobs
        for t in fire_times(job.schedule, job.time_zone, start, start + timedelta(hours=70))
    ]
    assert set(covered) - set(judged) == {
        (job, t) for job, t in covered if t + timedelta(seconds=job.retry_window_seconds) <= start
    }


def test_the_stack_writes_the_audit_config_the_job_reads() -> None:
    settings = with_audit_job(fixture_stack("dev"))
    config = AuditConfig.from_json(audit_environment(settings)["AUDIT_JOBS"])
    assert config.jobs == audited_jobs(settings)
    assert [job.name for job in config.jobs] == [settings.scheduler_job_id(job) for job in settings.jobs]
    assert settings.scheduler_job_id(AUDIT_JOB_NAME) in [job.name for job in config.jobs]
    assert (
        json.loads(function_environment(settings)["JOB_HANDLERS"])[settings.scheduler_job_id(AUDIT_JOB_NAME)]
        == AUDIT_HANDLER
    )
    first = settings.jobs[0]
    assert retry_window_seconds(settings, first) > latest_retry_arrival_seconds(
        first.retry, first.attempt_deadline_seconds
    )
    # Every run the audit judges still has its record: the window plus one audit interval
    # fits in the retention.
    assert all(
        job.retry_window_seconds + config.interval_seconds < settings.retention_seconds for job in config.jobs
    )


def test_runs_before_a_job_was_deployed_are_never_missed() -> None:
    settings = with_audit_job(fixture_stack("dev"))
    demo = settings.jobs[0]
    deployed = utc(2026, 3, 1, 10, 20)
    config = AuditConfig.from_json(audit_environment(settings, {demo.name: deployed})["AUDIT_JOBS"])
    (audited,) = [job for job in config.jobs if job.name == settings.scheduler_job_id(demo)]
    assert audited.not_before == deployed
    # Up to just after the 10:45 run's retry window has closed.
    up_to = utc(2026, 3, 1, 10, 46) + timedelta(seconds=audited.retry_window_seconds)
    due = runs_whose_window_closed([audited], after=utc(2026, 3, 1, 10), up_to=up_to)
    assert [t.minute for _, t in due] == [30, 45]  # 10:00 and 10:15 were before the job existed
    expected = expected_runs([audited], since=utc(2026, 3, 1, 10), until=utc(2026, 3, 1, 11))
    assert [t.minute for _, t in expected] == [30, 45, 0]


def test_a_config_job_may_not_take_the_audit_jobs_name() -> None:
    settings = with_audit_job(fixture_stack("dev"))
    assert with_audit_job(settings) == settings  # adding it twice is adding it once
    impostor = dataclasses.replace(settings.jobs[-1], handler="jobs.demo:run_demo_job")
    with pytest.raises(ValueError, match="reserved"):
        with_audit_job(dataclasses.replace(settings, jobs=(*settings.jobs[:-1], impostor)))


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize(
    ("timeout", "lease"), [(None, None), (15, 10), (60, 30), (300, 30), (900, 300), (1800, 600), (3600, 1800)]
)
def test_the_audit_job_obeys_every_timing_rule(stack: str, timeout: int | None, lease: int | None) -> None:
    """Its retries must outlive a crashed attempt's lease like every job's, whatever the
    function timeout and the lease of the stack."""
    settings = fixture_stack(stack)
    if timeout is not None and lease is not None:
        settings = dataclasses.replace(
            settings,
            function_timeout_seconds=float(timeout),
            lease_seconds=lease,
            retention_seconds=max(settings.retention_seconds, 86400.0),
            jobs=(),
        )
    settings = with_audit_job(settings)
    audit = settings.jobs[-1]
    violations = check_job_timing(settings.job_timing(audit))
    assert [v.rule for v in violations if not v.advisory] == []
    if timeout is None:  # the shipped stacks: not even an advisory
        assert violations == []
    # Consecutive audits still cover time back to back.
    interval = AuditConfig.from_json(audit_environment(settings)["AUDIT_JOBS"]).interval_seconds
    assert fire_times(audit.schedule, audit.time_zone, utc(2026, 1, 1), utc(2026, 1, 2))[1:3] == [
        utc(2026, 1, 1, 0, 5) + timedelta(seconds=interval * n) for n in (1, 2)
    ]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("", "must be set"),
        ("{", "not JSON"),
        ('{"jobs": []}', "interval_seconds"),
        ('{"interval_seconds": 3600, "jobs": [{"name": "a"}]}', "jobs\\[0\\].schedule"),
        (
            '{"interval_seconds": 3600, "jobs": [{"name": "a", "schedule": "* * *", '
            '"time_zone": "Etc/UTC", "retry_window_seconds": 60}]}',
            "unix-cron",
        ),
        (
            '{"interval_seconds": 3600, "jobs": [{"name": "a", "schedule": "* * * * *", '
            '"time_zone": "Etc/UTC", "retry_window_seconds": 60, "extra": 1}]}',
            "unknown fields",
        ),
        (
            '{"interval_seconds": 3600, "jobs": [{"name": "a", "schedule": "* * * * *", '
            '"time_zone": "Etc/UTC", "retry_window_seconds": 60, "not_before": "today"}]}',
            "not_before: expected an RFC 3339 time",
        ),
    ],
)
def test_a_bad_audit_jobs_variable_stops_the_instance_naming_it(raw: str, problem: str) -> None:
    from jobs import missed_runs  # its import reads the valid AUDIT_JOBS set below

    with pytest.raises(ConfigError, match=f"AUDIT_JOBS: .*{problem}"):
        missed_runs.config_from_env({"AUDIT_JOBS": raw})


@pytest.fixture(autouse=True)
def _audit_jobs_env(monkeypatch) -> None:
    settings = with_audit_job(fixture_stack("dev"))
    monkeypatch.setenv("AUDIT_JOBS", audit_environment(settings)["AUDIT_JOBS"])
