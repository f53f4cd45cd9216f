"""Catch-up's and pause's pure logic: which runs are delivered again (those a delivery would
claim), how a paused job's runs are judged, and the job table's audit fields that carry both (read
back, and refused when malformed)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once.audit.catchup import MAX_CATCHUP_PER_AUDIT, JobWindow, first_to_deliver, job_candidates
from exactly_once.audit.config import (
    MAX_CATCHUP_WINDOW_RUNS,
    AuditConfig,
    AuditedJob,
    AuditError,
    Catchup,
    CatchupRuns,
    Delivery,
    Redelivery,
)
from exactly_once.audit.missed_runs import RecordReader, judge_runs
from exactly_once.audit.pauses import Pause, PauseHistory
from exactly_once.audit.redelivery import check_redelivery, request_headers
from exactly_once.audit.schedule import fires
from exactly_once.config import ConfigError
from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER, RunKey, format_rfc3339
from exactly_once.ledger import lifecycle
from exactly_once.ledger.lifecycle import StoredRecord, Verdict
from tests.support.audit_runs import AuditOutcome, RecordingSender, reader_of, run_in_process

AUDIT_AT = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)
LEASE = timedelta(seconds=30)
NAME = "eos-dev_demo"


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 3, 1, hour, minute, tzinfo=UTC)


def job(runs: CatchupRuns = CatchupRuns.ALL, **changes: Any) -> AuditedJob:
    fields: dict[str, Any] = {
        "name": NAME,
        "schedule": "*/15 * * * *",
        "time_zone": "Etc/UTC",
        "retry_window_seconds": 900.0,
        "catchup": Catchup(3 * 3600.0, runs),
        "delivery": Delivery(headers={"X-CloudScheduler-JobName": NAME}, body=b"{}"),
    }
    fields.update(changes)
    return AuditedJob(**fields)


def stored(fields: Mapping[str, Any], *, written_ago: float = 5.0) -> StoredRecord:
    """A record as the audit's read (at its horizon) saw it, last written `written_ago` s before."""
    return StoredRecord(fields, update_time=AUDIT_AT - timedelta(seconds=written_ago), read_time=AUDIT_AT)


DONE = stored({"status": "completed", "result": "succeeded", "expire_at": AUDIT_AT + timedelta(days=1)})
# An attempt runs it: its lease (30 s) is live.
HELD = stored({"status": "in_progress", "attempt_id": "a"})
# Its attempt died two minutes ago: the lease lapsed, a delivery would take it over.
LAPSED = stored({"status": "in_progress", "attempt_id": "b"}, written_ago=120)
# Every attempt gave it back, with a checkpoint the next one resumes from.
RELEASED = stored({"status": "released", "checkpoint": '{"page": 3}'})


def reader(recorded: Mapping[datetime, StoredRecord], name: str = NAME) -> RecordReader:
    return reader_of({RunKey("p", "l", name, t).run_id: record for t, record in recorded.items()})


def picked(
    audited: AuditedJob,
    recorded: Mapping[datetime, StoredRecord],
    now: datetime = AUDIT_AT,
    *,
    target: str | None = None,
    pauses: PauseHistory | None = None,
) -> list[datetime]:
    window = job_candidates(
        audited,
        project="p",
        location="l",
        now=now,
        read_records=reader(recorded),
        lease=LEASE,
        target=target,
        pauses=pauses,
    )
    return [run.schedule_time for run in first_to_deliver(window.chosen)]


def closed_in_window() -> list[datetime]:
    """The runs of the 12:05 audit's window [09:05, 12:05] whose retry window (15 min) closed."""
    return [
        t for t in (at(h, m) for h in (9, 10, 11) for m in (0, 15, 30, 45)) if at(9, 5) <= t <= at(11, 50)
    ]


def test_all_delivers_every_closed_run_a_delivery_would_claim_oldest_first() -> None:
    recorded = {at(9, 15): DONE, at(10, 0): HELD, at(10, 30): LAPSED, at(10, 45): RELEASED}
    # Completed and held runs are left alone; lapsed and released ones are claimable again.
    assert picked(job(), recorded) == [t for t in closed_in_window() if t not in (at(9, 15), at(10, 0))]


def test_latest_delivers_the_newest_closed_run_only_while_nothing_later_is_recorded() -> None:
    latest = job(CatchupRuns.LATEST)
    assert picked(latest, {}) == [at(11, 45)]
    assert picked(latest, {at(11, 30): DONE}) == [at(11, 45)]
    assert picked(latest, {at(11, 45): DONE}) == []
    assert picked(latest, {at(11, 45): HELD}) == []  # an attempt runs it now
    assert picked(latest, {at(11, 45): LAPSED}) == [at(11, 45)]
    assert picked(latest, {at(11, 45): RELEASED}) == [at(11, 45)]
    # 12:00 is still in its retry window, but it was delivered: the job has moved on.
    assert picked(latest, {at(12, 0): HELD}) == []
    assert picked(latest, {at(12, 0): LAPSED}) == []


def test_paused_jobs_and_runs_before_deployment_are_left_alone() -> None:
    assert picked(job(paused=True), {}) == []
    assert picked(job(not_before=at(11, 20)), {}) == [at(11, 30), at(11, 45)]


def test_no_run_inside_a_recorded_pause_is_delivered_after_the_resume() -> None:
    # Resumed now (paused: false), but the history says it was paused from 10:00 to 11:00.
    resumed: PauseHistory = {NAME: (Pause(at(10, 0), at(11, 0)),)}
    outside = [t for t in closed_in_window() if not at(10, 0) <= t <= at(11, 0)]
    assert picked(job(), {}, pauses=resumed) == outside
    # Paused again since 11:20, still paused: its runs since are not delivered either.
    paused_again: PauseHistory = {NAME: (Pause(at(10, 0), at(11, 0)), Pause(at(11, 20)))}
    assert picked(job(), {}, pauses=paused_again) == [t for t in outside if t < at(11, 20)]


def test_a_run_recorded_by_another_target_is_never_delivered_again() -> None:
    other = stored({"status": "completed", "target": "crm-handler"})
    lapsed_other = stored({"status": "in_progress", "target": "crm-handler"}, written_ago=120)
    runs = picked(job(), {at(11, 45): other, at(11, 30): lapsed_other}, target="eos")
    assert at(11, 45) not in runs and at(11, 30) not in runs
    assert at(11, 15) in runs


def test_one_audit_delivers_at_most_a_hundred_runs_the_oldest() -> None:
    busy = job(schedule="* * * * *", catchup=Catchup(86400.0, CatchupRuns.ALL))
    runs = picked(busy, {})
    assert len(runs) == MAX_CATCHUP_PER_AUDIT and runs == sorted(runs)
    # The window is (12:05 a day before, 12:05]: the run exactly a day old lies outside it.
    assert runs[0] == AUDIT_AT - timedelta(seconds=86400) + timedelta(minutes=1)


def test_a_window_wider_than_an_audit_walks_is_judged_on_its_newest_runs() -> None:
    def window_of(days: int) -> JobWindow:
        every_minute = job(schedule="* * * * *", catchup=Catchup(days * 86400.0, CatchupRuns.ALL))
        return job_candidates(
            every_minute, project="p", location="l", now=AUDIT_AT, read_records=reader({}), lease=LEASE
        )

    # A week of a job every minute is the most the stack allows: every run of it is walked.
    week = window_of(7)
    assert not week.truncated
    assert week.chosen[0].schedule_time == AUDIT_AT - timedelta(days=7) + timedelta(minutes=1)
    # Eight days: only the newest MAX_CATCHUP_WINDOW_RUNS (a week's) are walked, without failing.
    wide = window_of(8)
    assert wide.truncated
    assert wide.chosen[0].schedule_time == AUDIT_AT - timedelta(minutes=MAX_CATCHUP_WINDOW_RUNS - 1)
    assert [run.schedule_time for run in wide.chosen] == [run.schedule_time for run in week.chosen]


def test_a_paused_jobs_unrecorded_runs_are_paused_and_recorded_ones_judged_as_usual() -> None:
    def judged(record: StoredRecord | None, *, window_closed: bool, paused: bool) -> Verdict:
        return lifecycle.judge(
            record, window_closed=window_closed, paused=paused, target=None, default_lease=LEASE
        )

    assert judged(None, window_closed=True, paused=True) is Verdict.PAUSED
    assert judged(None, window_closed=False, paused=True) is Verdict.PAUSED
    assert judged(DONE, window_closed=True, paused=True) is Verdict.COMPLETED
    assert judged(LAPSED, window_closed=True, paused=True) is Verdict.MISSED  # it was delivered
    assert judged(None, window_closed=True, paused=False) is Verdict.MISSED
    assert not lifecycle.deliverable_again(None, Verdict.PAUSED, target=None, default_lease=LEASE)
    fire = fires("*/15 * * * *", "Etc/UTC", at(10, 0), at(10, 0))
    judged_runs = judge_runs(
        [(job(paused=True), fire[0])],
        project="p",
        location="l",
        now=AUDIT_AT,
        read_records=reader({}),
        lease=LEASE,
    )
    assert [(run.state, "paused: true" in run.detail, run.deliverable) for run in judged_runs] == [
        (Verdict.PAUSED, True, False)
    ]


# ---- Catch-up within an audit run (jobs/missed_runs.run_audit) --------------------------------


def _audit(
    jobs: Sequence[AuditedJob],
    records: Mapping[str, StoredRecord],
    send: RecordingSender,
    *,
    previous: AuditOutcome | None = None,
) -> AuditOutcome:
    config = AuditConfig(
        jobs=tuple(jobs), interval_seconds=3600, redeliveries=(Redelivery("http://127.0.0.1:1/"),)
    )
    return run_in_process(
        config,
        reader_of(records),
        send,
        project="p",
        location="l",
        job_name="audit",
        when=AUDIT_AT,
        lease=LEASE,
        retention=timedelta(days=1),
        previous=previous,
    )


def test_an_audit_delivers_the_runs_of_jobs_with_a_policy_and_reports_the_rest_missed() -> None:
    other = job(name="other", catchup=None, delivery=None)
    send = RecordingSender(refuse={at(11, 30)})
    audit = _audit([job(), other], {}, send)
    delivered = [t for t in closed_in_window() if t != at(11, 30)]
    assert send.sent == [(NAME, t) for t in delivered]  # never a run of the job without a policy
    assert audit.caught_up() == [format_rfc3339(t) for t in delivered]
    assert [entry["via"] for entry in audit.output["caught_up"]] == [
        f"recorded #{n}" for n in range(1, len(delivered) + 1)
    ]
    lines = audit.events("catchup_delivery")
    assert [(line["schedule_time"], line["delivered"]) for line in lines] == [
        (format_rfc3339(t), t != at(11, 30)) for t in closed_in_window()
    ]
    (refused,) = [line for line in lines if not line["delivered"]]
    assert refused["severity"] == "ERROR" and "the next audit tries again" in refused["message"]
    # Judged in (11:05, 12:05]: 11:00 to 11:45 of both jobs. Those delivered again are no missed
    # runs; the one whose hand-over failed is, and so is every run of the job without a policy.
    span = {format_rfc3339(at(11, m)) for m in (0, 15, 30, 45)}
    assert audit.missed() == {("other", t) for t in span} | {(NAME, format_rfc3339(at(11, 30)))}
    assert audit.output["missed"] == 5


def test_an_audit_says_when_a_window_held_more_runs_than_it_walks() -> None:
    wide = job(schedule="* * * * *", catchup=Catchup(8 * 86400.0, CatchupRuns.ALL))
    send = RecordingSender()
    audit = _audit([wide], {}, send)
    (warning,) = [line for line in audit.lines if "holds more runs than an audit walks" in line["message"]]
    assert (warning["severity"], warning["job"]) == ("WARNING", NAME)
    # One audit delivers the oldest hundred of the runs it walked; the next audit the next.
    assert [t for _, t in send.sent][:1] == [AUDIT_AT - timedelta(minutes=MAX_CATCHUP_WINDOW_RUNS - 1)]
    assert len(send.sent) == MAX_CATCHUP_PER_AUDIT


def test_a_resume_does_not_make_the_runs_of_the_pause_up() -> None:
    """The last audit knew the job paused since 10:00; the stack recorded its resume at 11:00
    (so Scheduler resumed it by 11:30). This audit delivers the runs missed outside the pause
    only, and counts those inside it paused."""
    earlier = AuditOutcome(
        "audit-11:05",
        at(11, 5),
        {"judged_until": format_rfc3339(at(11, 5)), "pauses": {NAME: [[format_rfc3339(at(10, 0)), None]]}},
        [],
    )
    send = RecordingSender()
    audit = _audit([job(pause_changed_at=at(11, 0))], {}, send, previous=earlier)
    assert [t for _, t in send.sent] == [at(9, 15), at(9, 30), at(9, 45), at(11, 45)]
    assert audit.output["pauses"] == {NAME: [[format_rfc3339(at(10, 0)), format_rfc3339(at(11, 30))]]}
    # Judged in (11:05, 12:05]: 11:00, 11:15 and 11:30 were paused; 11:45 was delivered again.
    assert (audit.output["judged"], audit.output["paused"], audit.output["missed"]) == (4, 3, 0)
    assert audit.missed() == set()


def test_a_catchup_delivery_sends_the_jobs_headers_with_the_runs_own_schedule_time() -> None:
    headers = request_headers(job(), at(11, 45))
    assert headers == {
        "X-CloudScheduler-JobName": NAME,
        SCHEDULE_TIME_HEADER: "2026-03-01T11:45:00Z",
        "Cache-Control": "no-cache",
    }


def test_the_audit_config_carries_pause_catchup_and_redelivery_both_ways() -> None:
    config = AuditConfig(
        jobs=(job(paused=True, pause_changed_at=at(9, 0), delivery=Delivery({"A": "b"}, b"\x00{}", 60.0)),),
        interval_seconds=3600,
        redeliveries=(Redelivery("https://f", "projects/p/locations/l/queues/q", "i@x"),),
    )
    again = AuditConfig.from_json(config.to_json())
    assert again == config
    assert again.jobs[0].delivery == Delivery({"A": "b"}, b"\x00{}", 60.0)
    assert again.jobs[0].pause_changed_at == at(9, 0)


def _raw(**job_fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(
        AuditConfig(
            jobs=(job(),), interval_seconds=3600, redeliveries=(Redelivery("http://127.0.0.1:1/"),)
        ).to_json()
    )
    entry["jobs"][0].update(job_fields)
    return entry


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"catchup": {"window_seconds": 7200, "runs": "some"}},
            "jobs[0].catchup.runs: expected one of latest, all",
        ),
        (
            {"catchup": {"window_seconds": -1, "runs": "all"}},
            "jobs[0].catchup.window_seconds: expected a positive",
        ),
        ({"paused": "yes"}, "jobs[0].paused: expected true or false"),
        ({"pause_changed_at": "yesterday"}, "jobs[0].pause_changed_at: expected an RFC 3339 time"),
        ({"delivery": {"headers": {"A": 1}}}, "jobs[0].delivery.headers: expected string names and values"),
        ({"delivery": {"headers": {}, "body": "***"}}, "jobs[0].delivery.body: expected base64"),
        ({"delivery": None}, "jobs[0].delivery"),
    ],
)
def test_malformed_audit_config_fields_are_refused_by_name(change: dict[str, Any], problem: str) -> None:
    raw = _raw(**change)
    if change.get("delivery", 0) is None:
        del raw["jobs"][0]["delivery"]
    with pytest.raises(AuditError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        AuditConfig.from_json(json.dumps(raw))


def test_a_catchup_without_a_redelivery_or_a_queue_without_an_invoker_is_refused() -> None:
    raw = _raw()
    del raw["redelivery"]
    with pytest.raises(AuditError, match="nothing says where to deliver"):
        AuditConfig.from_json(json.dumps(raw))
    raw["redelivery"] = {"url": "https://f", "queue": "projects/p/locations/l/queues/q"}
    with pytest.raises(AuditError, match="a queue needs the invoker account"):
        AuditConfig.from_json(json.dumps(raw))


def test_a_deployed_function_never_posts_to_itself() -> None:
    check_redelivery(Redelivery("http://127.0.0.1:8080/"))
    check_redelivery(Redelivery("https://f", "projects/p/locations/l/queues/q", "i@x"))
    with pytest.raises(ConfigError, match="without a queue must be http://<loopback>"):
        check_redelivery(Redelivery("https://europe-west1-p.cloudfunctions.net/eos"))
