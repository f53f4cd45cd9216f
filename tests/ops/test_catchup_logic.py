"""Catch-up's and pause's pure logic: which runs are delivered again, how a paused job's runs
are judged, and the AUDIT_JOBS fields that carry both (read back, and refused when malformed)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once.audit.catchup import MAX_CATCHUP_PER_AUDIT, catchup_candidates
from exactly_once.audit.config import (
    AuditConfig,
    AuditedJob,
    AuditError,
    Catchup,
    CatchupRuns,
    Delivery,
    Redelivery,
)
from exactly_once.audit.missed_runs import RunState, classify, judge_runs
from exactly_once.audit.redelivery import check_redelivery, request_headers
from exactly_once.config import ConfigError
from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER, RunKey

AUDIT_AT = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 3, 1, hour, minute, tzinfo=UTC)


def job(runs: CatchupRuns = CatchupRuns.ALL, **changes: Any) -> AuditedJob:
    fields: dict[str, Any] = {
        "name": "eos-dev_demo",
        "schedule": "*/15 * * * *",
        "time_zone": "Etc/UTC",
        "retry_window_seconds": 900.0,
        "catchup": Catchup(3 * 3600.0, runs),
        "delivery": Delivery(headers={"X-CloudScheduler-JobName": "eos-dev_demo"}, body=b"{}"),
    }
    fields.update(changes)
    return AuditedJob(**fields)


def reader(recorded: Mapping[datetime, Mapping[str, Any]]):
    by_id = {RunKey("p", "l", "eos-dev_demo", t).run_id: record for t, record in recorded.items()}

    def read(ids: Sequence[str]) -> Mapping[str, Mapping[str, Any]]:
        return {run_id: by_id[run_id] for run_id in ids if run_id in by_id}

    return read


def picked(audited: AuditedJob, recorded: Mapping[datetime, Mapping[str, Any]], now: datetime = AUDIT_AT):
    runs = catchup_candidates([audited], project="p", location="l", now=now, read_records=reader(recorded))
    return [run.schedule_time for run in runs]


DONE = {"status": "completed", "result": "succeeded"}


def test_all_delivers_every_unrecorded_closed_run_in_the_window_oldest_first() -> None:
    # Window (09:05, 12:05]; a run's retry window (15 min) must have closed: up to 11:50.
    recorded = {at(9, 15): DONE, at(10, 0): {"status": "in_progress", "attempt_id": "a"}}
    expected = [
        t for t in (at(h, m) for h in (9, 10, 11) for m in (0, 15, 30, 45)) if at(9, 5) <= t <= at(11, 50)
    ]
    assert picked(job(), recorded) == [t for t in expected if t not in recorded]


def test_latest_delivers_the_newest_closed_run_only_while_nothing_later_is_recorded() -> None:
    assert picked(job(CatchupRuns.LATEST), {}) == [at(11, 45)]
    assert picked(job(CatchupRuns.LATEST), {at(11, 30): DONE}) == [at(11, 45)]
    assert picked(job(CatchupRuns.LATEST), {at(11, 45): DONE}) == []
    # 12:00 is still in its retry window, but it was delivered: the job has moved on.
    assert picked(job(CatchupRuns.LATEST), {at(12, 0): {"status": "in_progress"}}) == []


def test_paused_jobs_jobs_without_a_policy_and_runs_before_deployment_are_left_alone() -> None:
    assert picked(job(paused=True), {}) == []
    assert picked(job(catchup=None), {}) == []
    assert picked(job(not_before=at(11, 20)), {}) == [at(11, 30), at(11, 45)]


def test_a_run_recorded_by_another_target_is_never_delivered_again() -> None:
    other = {"status": "completed", "target": "crm-handler"}
    runs = catchup_candidates(
        [job()],
        project="p",
        location="l",
        now=AUDIT_AT,
        read_records=reader({at(11, 45): other}),
        target="eos",
    )
    assert at(11, 45) not in [run.schedule_time for run in runs]


def test_one_audit_delivers_at_most_a_hundred_runs_the_oldest() -> None:
    busy = job(schedule="* * * * *", catchup=Catchup(86400.0, CatchupRuns.ALL))
    runs = picked(busy, {})
    assert len(runs) == MAX_CATCHUP_PER_AUDIT and runs == sorted(runs)
    assert runs[0] == AUDIT_AT - timedelta(seconds=86400)


def test_a_paused_jobs_unrecorded_runs_are_paused_and_recorded_ones_judged_as_usual() -> None:
    closes = at(10, 15)
    assert classify(None, closes, at(12, 0), paused=True) is RunState.PAUSED
    assert classify(None, closes, at(10, 0), paused=True) is RunState.PAUSED
    assert classify(DONE, closes, at(12, 0), paused=True) is RunState.COMPLETED
    assert classify(None, closes, at(12, 0)) is RunState.MISSED
    judged = judge_runs(
        [(job(paused=True), at(10, 0))], project="p", location="l", now=AUDIT_AT, read_records=reader({})
    )
    assert [(run.state, "paused: true" in run.detail) for run in judged] == [(RunState.PAUSED, True)]


def test_a_catchup_delivery_sends_the_jobs_headers_with_the_runs_own_schedule_time() -> None:
    headers = request_headers(job(), at(11, 45))
    assert headers == {
        "X-CloudScheduler-JobName": "eos-dev_demo",
        SCHEDULE_TIME_HEADER: "2026-03-01T11:45:00Z",
        "Cache-Control": "no-cache",
    }


def test_the_audit_config_carries_pause_catchup_and_redelivery_both_ways() -> None:
    config = AuditConfig(
        jobs=(job(paused=True, delivery=Delivery({"A": "b"}, b"\x00{}", 60.0)),),
        interval_seconds=3600,
        redelivery=Redelivery("https://f", "projects/p/locations/l/queues/q", "i@x"),
    )
    again = AuditConfig.from_json(config.to_json())
    assert again == config
    assert again.jobs[0].delivery == Delivery({"A": "b"}, b"\x00{}", 60.0)


def _raw(**job_fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(
        AuditConfig(
            jobs=(job(),), interval_seconds=3600, redelivery=Redelivery("http://127.0.0.1:1/")
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
