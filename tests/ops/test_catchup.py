"""Catch-up after an outage, on the real function server and the Firestore emulator: the
audit job delivers the missed runs of a job with a `catchup` policy again, over loopback HTTP
as a local stack does, and the function's ledger runs each once."""

from __future__ import annotations

import dataclasses
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from google.cloud.firestore import DocumentSnapshot

from exactly_once import log_fields
from exactly_once.audit.config import Catchup, CatchupRuns, Redelivery
from exactly_once.delivery.scheduler_request import RunKey, format_rfc3339
from infra.plan.audit_job import audit_environment
from infra.settings.environment import function_environment
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.stack import StackSettings
from localrun.emulator import free_loopback_port
from tests.ops.conftest import DevFunction
from tests.support.waiting import wait_until

# Three hours: at least the demo job's retry window plus the audit's hour, within the retention.
WINDOW_SECONDS = 3 * 3600


def _day_at(hour: int, minute: int) -> datetime:
    day = datetime.now(UTC).date() - timedelta(days=2)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _catching_up(settings: StackSettings, runs: CatchupRuns) -> StackSettings:
    demo = dataclasses.replace(settings.jobs[0], catchup=Catchup(WINDOW_SECONDS, runs))
    return dataclasses.replace(settings, jobs=(demo, *settings.jobs[1:]))


def _serve(function_servers, settings, emulator_host, project, db, log_path) -> DevFunction:
    """The dev function whose audit delivers missed runs to the function itself, on loopback."""
    port = free_loopback_port()
    env = {
        **function_environment(settings),
        **audit_environment(settings, redelivery=Redelivery(url=f"http://127.0.0.1:{port}/")),
        "GOOGLE_CLOUD_PROJECT": project,
        "FIRESTORE_DATABASE": "(default)",
        "FIRESTORE_EMULATOR_HOST": emulator_host,
    }
    return DevFunction(settings, function_servers(env, port=port), db, log_path)


def _executed_times(function: DevFunction) -> Counter[datetime]:
    return Counter(record["schedule_time"] for record in function.executions(function.first_job))


def _catchup_lines(function: DevFunction, audit_run_id: str) -> list[dict[str, object]]:
    return [
        line
        for line in function.log_lines()
        if line.get(log_fields.EVENT) == log_fields.CATCHUP_DELIVERY
        and line.get("audit_run_id") == audit_run_id
    ]


@pytest.mark.parametrize(
    ("runs", "caught_up"),
    [
        (CatchupRuns.ALL, [_day_at(11, 15), _day_at(11, 30), _day_at(11, 45)]),
        (CatchupRuns.LATEST, [_day_at(11, 45)]),
    ],
)
def test_an_outage_of_three_runs_is_caught_up_once_by_the_audit(
    function_servers, emulator_host, project, db, log_path, dev_settings, runs, caught_up
) -> None:
    settings = _catching_up(dev_settings, runs)
    function = _serve(function_servers, settings, emulator_host, project, db, log_path)
    demo = function.first_job
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    # Runs are delivered every 15 minutes until the outage, which swallows 11:15, 11:30 and 11:45.
    # 09:00 is not delivered either: it lies outside the window of the 12:05 audit.
    before_outage = [_day_at(hour, minute) for hour in (9, 10, 11) for minute in (0, 15, 30, 45)]
    delivered = [t for t in before_outage if t > _day_at(9, 0) and t < _day_at(11, 15)]
    for instant in delivered:
        assert function.deliver(demo, instant).json()["outcome"] == "executed"
    assert _executed_times(function) == Counter(delivered)

    audit = function.deliver(audit_job, _day_at(12, 5)).json()
    assert audit["outcome"] == "executed"
    stamps = [format_rfc3339(t) for t in caught_up]
    assert [entry["schedule_time"] for entry in audit["output"]["caught_up"]] == stamps  # oldest first
    # Each caught-up run executed once, with its original schedule time; nothing else did.
    assert _executed_times(function) == Counter([*delivered, *caught_up])
    lines = _catchup_lines(function, audit["run_id"])
    assert [(line[log_fields.SCHEDULE_TIME], line["delivered"]) for line in lines] == [
        (s, True) for s in stamps
    ]
    assert all("outcome executed" in str(line["via"]) for line in lines)
    # A caught-up run is no missed run; the runs `latest` leaves behind still are.
    missed = {
        line[log_fields.SCHEDULE_TIME]
        for line in function.log_lines()
        if line.get(log_fields.EVENT) == log_fields.MISSED_RUN
        and line.get("audit_run_id") == audit["run_id"]
        and line[log_fields.JOB] == settings.scheduler_job_id(demo)
    }
    assert missed == {format_rfc3339(t) for t in (_day_at(11, 15), _day_at(11, 30), _day_at(11, 45))} - set(
        stamps
    )

    # The job is back: 12:00 to 12:45 come as scheduled. The next audit delivers nothing again,
    # and a redelivered audit run is a duplicate that delivers nothing either.
    for minute in (0, 15, 30, 45):
        assert function.deliver(demo, _day_at(12, minute)).json()["outcome"] == "executed"
    again = function.deliver(audit_job, _day_at(12, 5)).json()
    assert again["outcome"] == "duplicate_completed"
    second = function.deliver(audit_job, _day_at(13, 5)).json()
    assert second["outcome"] == "executed"
    assert second["output"]["caught_up"] == []
    assert _catchup_lines(function, second["run_id"]) == []
    expected = Counter([*delivered, *caught_up, *(_day_at(12, minute) for minute in (0, 15, 30, 45))])
    assert _executed_times(function) == expected
    assert max(_executed_times(function).values()) == 1


def test_only_runs_no_attempt_holds_or_recorded_are_delivered_again(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    """11:00 failed terminally and 11:30 is still running: both have records, and catch-up
    leaves them alone. 11:15 failed retryably on its every delivery (each failure releases the
    record, so no attempt holds it) and 11:45 was never delivered: those two run again, once."""
    settings = _catching_up(dev_settings, CatchupRuns.ALL)
    function = _serve(function_servers, settings, emulator_host, project, db, log_path)
    demo = function.first_job
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    for instant in [_day_at(h, m) for h in (9, 10) for m in (0, 15, 30, 45)]:
        if instant > _day_at(9, 0):
            assert function.deliver(demo, instant).json()["outcome"] == "executed"
    terminal = function.deliver(demo, _day_at(11, 0), body=b'{"sleep_seconds": -1}').json()
    assert terminal["outcome"] == "failed_terminal"
    released = function.deliver(demo, _day_at(11, 15), body=b'{"fail": true}').json()
    assert released["outcome"] == "failed_released"

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(function.deliver, demo, _day_at(11, 30), b'{"sleep_seconds": 20}')
        run_id = RunKey(
            settings.project, settings.region, settings.scheduler_job_id(demo), _day_at(11, 30)
        ).run_id
        record = function.db.collection(settings.runs_collection).document(run_id)

        def claimed() -> bool:
            return cast(DocumentSnapshot, record.get()).exists

        wait_until(claimed, timeout=60, what="the 11:30 attempt's claim")
        audit = function.deliver(audit_job, _day_at(12, 5)).json()
        assert running.result(timeout=120).json()["outcome"] == "executed"

    stamps = [format_rfc3339(_day_at(11, 15)), format_rfc3339(_day_at(11, 45))]
    assert [entry["schedule_time"] for entry in audit["output"]["caught_up"]] == stamps
    executed = _executed_times(function)
    assert [executed[_day_at(11, m)] for m in (0, 15, 30, 45)] == [0, 1, 1, 1]
