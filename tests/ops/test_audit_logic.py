"""The audit's pure logic: DST-correct fire times, each run's verdict (the lifecycle's), the
span each audit judges (from where the last one stopped), and the contract between the stack
and the job: the job table's `audit`."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from croniter import croniter

from exactly_once import RunContext, TerminalJobError
from exactly_once.audit import schedule as audit_schedule
from exactly_once.audit.config import AuditConfig, AuditedJob, AuditError, Redelivery
from exactly_once.audit.missed_runs import (
    expected_runs,
    judge_runs,
    runs_whose_window_closed,
    stack_target,
)
from exactly_once.audit.run import run_audit
from exactly_once.audit.schedule import FireTime, fire_times, fires
from exactly_once.config import ConfigError, FunctionConfig, OverlapPolicy
from exactly_once.delivery.scheduler_request import RunKey, format_rfc3339
from exactly_once.ledger import lifecycle
from exactly_once.ledger.lifecycle import StoredRecord, Verdict
from infra.plan.audit_job import (
    AUDIT_HANDLER,
    audit_config,
    audited_jobs,
    retry_window_seconds,
    with_audit_job,
)
from infra.settings.environment import job_table
from infra.settings.jobs import AUDIT_JOB_NAME
from policy.scheduler_guardrails.rules.timing.rules import check_job_timing, latest_retry_arrival_seconds
from tests.support.audit_runs import AuditOutcome, RecordingSender, reader_of, run_in_process
from tests.support.stack_tables import audit_table_env
from tests.support.stacks import demo_job, fixture_stack

LEASE = timedelta(seconds=30)
# When the records below were read (Firestore's clock): each is judged as of its read.
READ = datetime(2026, 1, 1, 12, tzinfo=UTC)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def stored(fields: Mapping[str, Any], *, written_ago: float = 5.0, read_at: datetime = READ) -> StoredRecord:
    """A record as one read saw it: last written `written_ago` seconds before the read."""
    return StoredRecord(fields, update_time=read_at - timedelta(seconds=written_ago), read_time=read_at)


def done(result: str = "succeeded", **more: Any) -> dict[str, Any]:
    """A completed record, inside its retention."""
    return {"status": "completed", "result": result, "expire_at": READ + timedelta(days=1), **more}


def test_fire_times_include_both_ends_of_the_window() -> None:
    times = fire_times("*/15 * * * *", "Etc/UTC", utc(2026, 3, 1, 10, 0), utc(2026, 3, 1, 10, 45))
    assert times == [utc(2026, 3, 1, 10, m) for m in (0, 15, 30, 45)]
    assert fire_times("*/15 * * * *", "Etc/UTC", utc(2026, 3, 1, 10, 1), utc(2026, 3, 1, 10, 14)) == []


def test_spring_forward_skips_the_missing_wall_time() -> None:
    # Europe/Berlin jumps from 02:00 to 03:00 on 2026-03-29: a 02:30 job does not fire that day.
    times = fire_times("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27), utc(2026, 3, 31))
    assert times == [utc(2026, 3, 27, 1, 30), utc(2026, 3, 28, 1, 30), utc(2026, 3, 30, 0, 30)]


def test_fall_back_fires_the_repeated_wall_time_once() -> None:
    # 2026-10-25 02:30 happens twice in Berlin (CEST, then CET): one run, with two instants.
    times = fire_times("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert times == [utc(2026, 10, 25, 0, 30)]
    assert fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)) == [
        FireTime(utc(2026, 10, 25, 0, 30), repeated=utc(2026, 10, 25, 1, 30))
    ]
    hourly = fires("0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23), utc(2026, 10, 25, 3))
    assert [fire.instants for fire in hourly] == [
        (utc(2026, 10, 24, 23),),
        (utc(2026, 10, 25, 0), utc(2026, 10, 25, 1)),  # 02:00 CEST, then 02:00 CET
        (utc(2026, 10, 25, 2),),
        (utc(2026, 10, 25, 3),),
    ]


def test_a_repeated_wall_time_counts_as_delivered_when_either_instant_has_a_record() -> None:
    job = AuditedJob("nightly", "30 2 * * *", "Europe/Berlin", 900)
    expected = expected_runs([job], since=utc(2026, 10, 24, 12), until=utc(2026, 10, 25, 12))
    first, second = (RunKey("p", "l", "nightly", utc(2026, 10, 25, h, 30)).run_id for h in (0, 1))

    def judged(records: Mapping[str, StoredRecord]) -> list[tuple[datetime, Verdict]]:
        runs = judge_runs(
            expected,
            project="p",
            location="l",
            now=utc(2026, 10, 26),  # both instants' windows closed long ago
            read_records=reader_of(records),
            lease=LEASE,
        )
        return [(run.schedule_time, run.state) for run in runs]

    assert judged({}) == [(utc(2026, 10, 25, 0, 30), Verdict.MISSED)]
    # Scheduler delivered it at the second instant: the run is judged by that record.
    assert judged({second: stored(done())}) == [(utc(2026, 10, 25, 1, 30), Verdict.COMPLETED)]
    assert judged({first: stored(done())}) == [(utc(2026, 10, 25, 0, 30), Verdict.COMPLETED)]


@pytest.mark.parametrize(
    ("schedule", "zone", "problem"),
    [
        ("*/15 * * *", "Etc/UTC", "unix-cron"),
        ("0 * * * *", "Mars/Olympus", "time zone"),
        ("0 0 31 2 *", "Etc/UTC", "never fires"),  # no 31st of February
    ],
)
def test_bad_schedules_are_audit_errors(schedule: str, zone: str, problem: str) -> None:
    with pytest.raises(AuditError, match=problem):
        fire_times(schedule, zone, utc(2026, 1, 1), utc(2026, 1, 2))


def test_a_wide_window_is_walked_to_its_newest_runs_without_failing() -> None:
    # Two months of a job every minute: some 85,000 runs, of which the newest ten are kept.
    newest = fires("* * * * *", "Etc/UTC", utc(2026, 1, 1), utc(2026, 3, 1), newest=10)
    assert [fire.instant for fire in newest] == [
        utc(2026, 3, 1) - timedelta(minutes=m) for m in range(9, -1, -1)
    ]
    # Without a bound, every run of the window (here a day's) is listed.
    assert len(fire_times("* * * * *", "Etc/UTC", utc(2026, 1, 1), utc(2026, 1, 2))) == 24 * 60 + 1


# (record, verdict while a delivery may still come, verdict once the retry window closed)
VERDICTS = {
    "succeeded": (stored(done()), Verdict.COMPLETED, Verdict.COMPLETED),
    "overlap skipped": (stored(done("overlap_skipped")), Verdict.COMPLETED, Verdict.COMPLETED),
    "terminal failure": (
        stored(done("terminal_failure")),
        Verdict.TERMINAL_FAILURE,
        Verdict.TERMINAL_FAILURE,
    ),
    "skipped late": (stored(done("skipped_late")), Verdict.SKIPPED_LATE, Verdict.SKIPPED_LATE),
    # In progress, its lease live (written 5 s before the read) or lapsed (60 s: the lease is 30 s).
    "leased": (stored({"status": "in_progress", "attempt_id": "a"}), Verdict.IN_PROGRESS, Verdict.MISSED),
    "lapsed": (
        stored({"status": "in_progress", "attempt_id": "a"}, written_ago=60),
        Verdict.IN_PROGRESS,
        Verdict.MISSED,
    ),
    # A lease the owner wrote is the one judged, not the reader's.
    "leased for longer": (
        stored({"status": "in_progress", "lease_seconds": 300.0}, written_ago=60),
        Verdict.IN_PROGRESS,
        Verdict.MISSED,
    ),
    "released": (stored({"status": "released", "checkpoint": "{}"}), Verdict.IN_PROGRESS, Verdict.MISSED),
    # Completed, but past its retention: a delivery would take it over, but the record still
    # says the run completed, so it is judged by its result, never missed or delivered again.
    "expired": (
        stored(done(expire_at=READ - timedelta(seconds=1))),
        Verdict.COMPLETED,
        Verdict.COMPLETED,
    ),
    "absent": (None, Verdict.PENDING, Verdict.MISSED),
}


@pytest.mark.parametrize("window_closed", [False, True])
@pytest.mark.parametrize("case", list(VERDICTS))
def test_each_record_is_judged_by_the_lifecycle(case: str, window_closed: bool) -> None:
    record, while_open, once_closed = VERDICTS[case]
    verdict = lifecycle.judge(
        record, window_closed=window_closed, paused=False, target=None, default_lease=LEASE
    )
    assert verdict is (once_closed if window_closed else while_open)


def test_a_live_lease_and_a_lapsed_one_are_told_apart_on_firestores_clock() -> None:
    leased, lapsed = VERDICTS["leased"][0], VERDICTS["lapsed"][0]
    assert lifecycle.state_of(leased, LEASE) is lifecycle.State.LEASED
    assert lifecycle.state_of(lapsed, LEASE) is lifecycle.State.LAPSED
    assert lifecycle.state_of(VERDICTS["leased for longer"][0], LEASE) is lifecycle.State.LEASED


OURS = "eos-dev-handler/main.handle_scheduled_job"
THEIRS = "crm-handler/main.handle_scheduled_job"


@pytest.mark.parametrize("window_closed", [False, True])
@pytest.mark.parametrize(
    ("fields", "verdict"),
    [
        (done(target=THEIRS), Verdict.MISSED),
        (done("terminal_failure", target=THEIRS), Verdict.MISSED),
        ({"status": "in_progress", "target": THEIRS}, Verdict.MISSED),
        (done(target=OURS), Verdict.COMPLETED),
        # A record without a target is nobody else's, as for the function's claim.
        (done(target=None), Verdict.COMPLETED),
    ],
)
def test_a_run_recorded_by_another_target_is_missed_at_once(
    fields: dict[str, Any], verdict: Verdict, window_closed: bool
) -> None:
    def judged(record_fields: Mapping[str, Any], target: str | None) -> Verdict:
        return lifecycle.judge(
            stored(record_fields),
            window_closed=window_closed,
            paused=False,
            target=target,
            default_lease=LEASE,
        )

    assert judged(fields, OURS) is verdict
    # Without this stack's target, the record is judged by its state and window alone.
    assert judged(fields, None) is judged({**fields, "target": None}, OURS)


def test_the_stack_target_is_read_from_the_newest_own_run_recorded() -> None:
    newest, older, oldest = ("audit-3", "audit-2", "audit-1")
    asked: list[list[str]] = []
    read = reader_of(
        {older: stored(done(target=OURS)), oldest: stored(done(target="old"))},
        asked,
    )
    assert stack_target(read, [newest, older, oldest]) == OURS
    assert asked == [[newest, older, oldest]]  # one batched read
    assert stack_target(reader_of({newest: stored(done(target=None))}), [newest]) is None
    assert stack_target(read, []) is None and len(asked) == 1


def test_a_run_of_another_target_says_which_target_recorded_it() -> None:
    job = AuditedJob("every-15", "*/15 * * * *", "Etc/UTC", 600)
    expected = expected_runs([job], since=utc(2026, 1, 1, 10), until=utc(2026, 1, 1, 10, 15))
    ours, theirs = (RunKey("p", "l", "every-15", utc(2026, 1, 1, 10, m)).run_id for m in (0, 15))
    records = {ours: stored(done(target=OURS)), theirs: stored(done(target=THEIRS))}
    runs = judge_runs(
        expected,
        project="p",
        location="l",
        now=utc(2026, 1, 1, 10, 16),  # the 10:15 run's window is still open
        read_records=reader_of(records),
        lease=LEASE,
        target=OURS,
    )
    assert [(run.state, run.other_target) for run in runs] == [
        (Verdict.COMPLETED, None),
        (Verdict.MISSED, THEIRS),
    ]
    assert runs[1].detail.startswith(f"recorded by target {THEIRS}, not this stack's {OURS}")
    assert "wrong_target" in runs[1].detail
    assert not runs[1].deliverable  # refused on every delivery: catch-up sends it nowhere


def test_judge_reads_records_by_run_id() -> None:
    job = AuditedJob("every-15", "*/15 * * * *", "Etc/UTC", 600)
    expected = expected_runs([job], since=utc(2026, 1, 1, 10), until=utc(2026, 1, 1, 10, 30))
    done_id = RunKey("p", "l", "every-15", utc(2026, 1, 1, 10, 15)).run_id
    asked: list[list[str]] = []
    runs = judge_runs(
        expected,
        project="p",
        location="l",
        now=utc(2026, 1, 1, 10, 35),
        read_records=reader_of({done_id: stored(done())}, asked),
        lease=LEASE,
    )
    assert [(run.schedule_time.minute, run.state) for run in runs] == [
        (0, Verdict.MISSED),
        (15, Verdict.COMPLETED),
        (30, Verdict.PENDING),  # its window closes at 10:40
    ]
    assert len(asked) == 1 and len(asked[0]) == 3  # one batched read
    assert runs[0].deliverable and not runs[1].deliverable and not runs[2].deliverable


def test_consecutive_audit_intervals_judge_every_run_exactly_once() -> None:
    jobs = [
        AuditedJob("a", "*/7 * * * *", "Etc/UTC", 800),
        AuditedJob("b", "0 2 * * *", "Europe/Berlin", 3000),
    ]
    start = utc(2026, 3, 28)
    judged: list[tuple[str, datetime]] = []
    for hour in range(72):  # across the spring-forward night
        up_to = start + timedelta(hours=hour + 1)
        for job in jobs:
            due = runs_whose_window_closed(job, after=up_to - timedelta(hours=1), up_to=up_to)
            judged += [(job.name, fire.instant) for fire in due]
    assert len(judged) == len(set(judged))
    covered = [
        (job, t)
        for job in jobs
        for t in fire_times(job.schedule, job.time_zone, start, start + timedelta(hours=70))
    ]
    assert {(job.name, t) for job, t in covered} - set(judged) == {
        (job.name, t) for job, t in covered if t + timedelta(seconds=job.retry_window_seconds) <= start
    }


# ---- The span each audit run judges (jobs/missed_runs.run_audit) ------------------------------

HOURLY = AuditedJob("every-15", "*/15 * * * *", "Etc/UTC", 900)
CONFIG = AuditConfig(jobs=(HOURLY,), interval_seconds=3600)
RETENTION = timedelta(days=1)


def _audit(
    when: datetime,
    *,
    previous: AuditOutcome | None = None,
    config: AuditConfig = CONFIG,
    records: Mapping[str, StoredRecord] | None = None,
    horizon: datetime | None = None,
) -> AuditOutcome:
    return run_in_process(
        config,
        reader_of(records or {}),
        RecordingSender(),
        project="p",
        location="l",
        job_name="audit",
        when=when,
        lease=LEASE,
        retention=RETENTION,
        previous=previous,
        horizon=horizon,
    )


def _judged(outcome: AuditOutcome) -> tuple[str, str]:
    return outcome.output["judged_from"], outcome.output["judged_until"]


def test_each_audit_judges_from_where_the_last_completed_one_stopped() -> None:
    first = _audit(utc(2026, 3, 1, 12, 5))
    # A first audit looks one interval back.
    assert _judged(first) == ("2026-03-01T11:05:00Z", "2026-03-01T12:05:00Z")
    # Windows closed in (11:05, 12:05]: the runs of 10:50:00 < t <= 11:50:00.
    assert first.missed() == {("every-15", format_rfc3339(utc(2026, 3, 1, 11, m))) for m in (0, 15, 30, 45)}
    assert (first.output["judged"], first.output["missed"]) == (4, 4)

    # Two audit runs were lost: the next one judges the three hours since, each run once.
    later = _audit(utc(2026, 3, 1, 15, 5), previous=first)
    assert _judged(later) == ("2026-03-01T12:05:00Z", "2026-03-01T15:05:00Z")
    assert later.missed() == {
        ("every-15", format_rfc3339(utc(2026, 3, 1, h, m))) for h in (12, 13, 14) for m in (0, 15, 30, 45)
    }
    assert not later.missed() & first.missed()
    assert "not_judged_before" not in later.output


def test_an_audit_never_judges_further_back_than_the_records_are_kept() -> None:
    first = _audit(utc(2026, 3, 1, 12, 5))
    # The next audit that completes runs three days later: records older than the retention
    # may be gone, so their runs are not judged (they would be reported missed for it).
    later = _audit(utc(2026, 3, 4, 12, 5), previous=first)
    oldest = utc(2026, 3, 4, 12, 5) - (RETENTION - timedelta(seconds=HOURLY.retry_window_seconds))
    assert _judged(later) == (format_rfc3339(oldest), "2026-03-04T12:05:00Z")
    assert later.output["not_judged_before"] == format_rfc3339(oldest)
    (summary,) = later.events("missed_run_audit")
    assert "were not judged" in summary["message"] and summary["severity"] == "WARNING"


def test_the_horizon_is_the_audits_claim_never_the_time_it_carries() -> None:
    # A forced audit run carries the next hour's ScheduleTime; its claim committed at 12:10.
    forced = _audit(utc(2026, 3, 1, 13, 5), horizon=utc(2026, 3, 1, 12, 10))
    assert _judged(forced) == ("2026-03-01T11:10:00Z", "2026-03-01T12:10:00Z")
    # Windows closed in (11:10, 12:10]: the runs of 11:00 to 11:45, not those of the hour the
    # ScheduleTime would have judged (12:00 to 12:45).
    assert forced.missed() == {("every-15", format_rfc3339(utc(2026, 3, 1, 11, m))) for m in (0, 15, 30, 45)}


def test_an_audit_without_its_claims_time_is_a_terminal_failure() -> None:
    context = RunContext(
        run_id="r",
        job_name="audit",
        schedule_time=utc(2026, 3, 1, 12, 5),
        project="p",
        location="l",
        attempt_id="a",
        fence=1,
        body=b"",
    )
    with pytest.raises(TerminalJobError, match="claimed_at"):
        run_audit(
            context, CONFIG, reader_of({}), RecordingSender(), io.StringIO(), lease=LEASE, retention=RETENTION
        )


def test_a_last_audit_output_it_cannot_read_counts_as_none() -> None:
    garbled = AuditOutcome("r0", utc(2026, 3, 1, 11, 5), {"judged_until": "an hour ago"}, [])
    audit = _audit(utc(2026, 3, 1, 12, 5), previous=garbled)
    assert _judged(audit) == ("2026-03-01T11:05:00Z", "2026-03-01T12:05:00Z")
    assert any("could not be read" in str(line["message"]) for line in audit.lines)


def test_a_job_the_audit_cannot_judge_is_one_error_line_and_the_others_are_judged() -> None:
    bad = (
        AuditedJob("never", "0 0 31 2 *", "Etc/UTC", 900),
        AuditedJob("garbled", "* * *", "Etc/UTC", 900),
        AuditedJob("nowhere", "0 * * * *", "Mars/Olympus", 900),
        # The same walk as "never"'s (one per schedule, zone and start): its error is this job's too.
        AuditedJob("never-either", "0 0 31 2 *", "Etc/UTC", 900),
    )
    config = AuditConfig(jobs=(bad[0], HOURLY, *bad[1:]), interval_seconds=3600)
    audit = _audit(utc(2026, 3, 1, 12, 5), config=config)
    errors = audit.events("audit_job_error")
    assert [line["job"] for line in errors] == ["never", "garbled", "nowhere", "never-either"]
    assert all(line["severity"] == "ERROR" for line in errors)
    assert "never fires" in errors[0]["error"] and "unix-cron" in errors[1]["error"]
    assert errors[3]["error"] == errors[0]["error"]
    assert sorted(audit.output["errors"]) == ["garbled", "never", "never-either", "nowhere"]
    # The good job is judged all the same.
    assert audit.missed() == {("every-15", format_rfc3339(utc(2026, 3, 1, 11, m))) for m in (0, 15, 30, 45)}
    (summary,) = audit.events("missed_run_audit")
    assert summary["jobs_not_judged"] == 4 and "4 jobs not judged" in summary["message"]


def test_jobs_that_share_a_schedule_have_it_walked_once_per_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[str] = []

    class Counted(croniter):  # type: ignore[misc]
        def __init__(self, expression: str, *args: Any, **kwargs: Any) -> None:
            walked.append(expression)
            super().__init__(expression, *args, **kwargs)

    monkeypatch.setattr(audit_schedule, "croniter", Counted)
    quarterly = tuple(AuditedJob(f"job-{index}", "*/15 * * * *", "Etc/UTC", 900) for index in range(20))
    hourly = AuditedJob("hourly", "0 * * * *", "Etc/UTC", 900)
    config = AuditConfig(jobs=(*quarterly, hourly), interval_seconds=3600)
    audit = _audit(utc(2026, 3, 1, 12, 5), config=config)
    # Every run of every job judged (none has a record: all missed), from two walks, not 21.
    assert audit.output["judged"] == audit.output["missed"] == 20 * 4 + 1
    assert sorted(walked) == ["*/15 * * * *", "0 * * * *"]


def test_the_stack_writes_the_audit_config_the_job_reads() -> None:
    settings = with_audit_job(fixture_stack("dev"))
    config = audit_config(settings)
    assert config.jobs == audited_jobs(settings)
    assert [job.name for job in config.jobs] == [settings.scheduler_job_id(job) for job in settings.jobs]
    assert settings.scheduler_job_id(AUDIT_JOB_NAME) in [job.name for job in config.jobs]
    audit_policy = job_table(settings).jobs[settings.scheduler_job_id(AUDIT_JOB_NAME)]
    assert audit_policy.handler == AUDIT_HANDLER
    # Two audit runs never judge at once: a second one waits for the first.
    assert audit_policy.overlap is OverlapPolicy.WAIT
    first = demo_job(settings)
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
    demo = demo_job(settings)
    deployed = utc(2026, 3, 1, 10, 20)
    config = audit_config(settings, {demo.name: deployed})
    (audited,) = [job for job in config.jobs if job.name == settings.scheduler_job_id(demo)]
    assert audited.not_before == deployed
    # Up to just after the 10:45 run's retry window has closed.
    up_to = utc(2026, 3, 1, 10, 46) + timedelta(seconds=audited.retry_window_seconds)
    due = runs_whose_window_closed(audited, after=utc(2026, 3, 1, 10), up_to=up_to)
    assert [fire.instant.minute for fire in due] == [30, 45]  # 10:00 and 10:15 were before the job existed
    expected = expected_runs([audited], since=utc(2026, 3, 1, 10), until=utc(2026, 3, 1, 11))
    assert [fire.instant.minute for _, fire in expected] == [30, 45, 0]


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
    interval = audit_config(settings).interval_seconds
    assert fire_times(audit.schedule, audit.time_zone, utc(2026, 1, 1), utc(2026, 1, 2))[1:3] == [
        utc(2026, 1, 1, 0, 5) + timedelta(seconds=interval * n) for n in (1, 2)
    ]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("", "must hold `audit`"),
        ("{", "not JSON"),
        ('{"jobs": []}', "interval_seconds"),
        ('{"interval_seconds": 3600, "jobs": [{"name": "a"}]}', "jobs\\[0\\].schedule"),
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
def test_a_bad_audit_config_stops_the_instance_naming_it(raw: str, problem: str, tmp_path) -> None:
    """The job table's `audit`, as the audit job reads it at start-up ("": a table without one;
    "{": a table that is not JSON at all)."""
    from jobs import missed_runs  # its import reads the valid table set below

    table = tmp_path / "job_table.json"
    table.write_text('{"jobs": {}' + (f', "audit": {raw}' if raw else "") + "}", encoding="utf-8")
    env = {"JOB_TABLE": str(table)}
    with pytest.raises(ConfigError, match=f"JOB_TABLE.*{problem}"):
        missed_runs.audit_config(FunctionConfig.from_env(env), env)


def test_a_function_whose_region_the_per_region_redelivery_does_not_name_stops(tmp_path) -> None:
    """Two regions: each function's SERVING_REGION picks its catch-up queue at start-up; one
    the table does not name is refused there, naming the variable, not at the first catch-up."""
    from jobs import missed_runs

    regional = [
        Redelivery(f"https://{r}-p.cloudfunctions.net/f", f"projects/p/locations/{r}/queues/q", "i@x", r)
        for r in ("a", "b")
    ]
    raw = json.loads(AuditConfig(jobs=(), interval_seconds=3600, redeliveries=tuple(regional)).to_json())
    function = FunctionConfig(audit=raw)
    config = missed_runs.audit_config(function, {"SERVING_REGION": "b"})
    assert missed_runs.function_redelivery(config, {"SERVING_REGION": "b"}) == regional[1]
    for env in ({}, {"SERVING_REGION": "c"}):
        with pytest.raises(
            ConfigError, match=r"SERVING_REGION: the job table.s audit\.redelivery names the regions a, b"
        ):
            missed_runs.audit_config(function, env)


def test_a_jobs_bad_schedule_does_not_stop_the_instance() -> None:
    """The instance serves every job of the stack: a schedule or zone the audit cannot read is
    that job's audit_job_error at audit time (above), never a start-up failure."""
    from jobs import missed_runs

    for schedule, zone in (("* * *", "Etc/UTC"), ("0 0 31 2 *", "Etc/UTC"), ("0 * * * *", "Mars/Olympus")):
        raw = json.dumps(
            {
                "interval_seconds": 3600,
                "jobs": [{"name": "a", "schedule": schedule, "time_zone": zone, "retry_window_seconds": 60}],
            }
        )
        function = FunctionConfig(audit=json.loads(raw))
        assert missed_runs.audit_config(function, {}).jobs[0].schedule == schedule


@pytest.fixture(autouse=True)
def _audit_jobs_env(monkeypatch) -> None:
    settings = with_audit_job(fixture_stack("dev"))
    for name, value in audit_table_env(settings).items():
        monkeypatch.setenv(name, value)
