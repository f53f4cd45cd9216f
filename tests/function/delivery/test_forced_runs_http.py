"""Forced runs and starting deadlines end to end: a real Functions Framework server on loopback,
the demo job (which records each execution), the emulator's clock as Firestore's."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once.delivery.forced_runs import FORCED_RUN_TOLERANCE
from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER, run_key_from_headers
from exactly_once.run_key import Trigger, format_rfc3339
from tests.support.demo_runs import HEADERS, RUN_ID, deliver, executions, run_record, server_env
from tests.support.job_tables import jobs_env
from tests.support.waiting import wait_until


def ahead_by(seconds: float) -> datetime:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0)


def outcome(reply) -> tuple[int, str, str]:
    body = reply.json()
    return reply.status_code, body["outcome"], body["trigger"]


def test_a_forced_run_runs_once_and_the_scheduled_run_at_its_time_runs_after_it(start_server, db):
    server = start_server()
    # Ahead by the tolerance and 10 s more: the claim has 10 s to commit and still be forced.
    announced = ahead_by(FORCED_RUN_TOLERANCE.total_seconds() + 10)
    headers = {**HEADERS, SCHEDULE_TIME_HEADER: format_rfc3339(announced)}
    scheduled = run_key_from_headers(headers)
    forced = scheduled.as_triggered(Trigger.FORCED)

    assert outcome(deliver(server, headers=headers)) == (200, "executed", "forced")
    assert outcome(deliver(server, headers=headers)) == (200, "duplicate_completed", "forced")
    assert len(executions(db, forced.run_id)) == 1
    assert executions(db, scheduled.run_id) == []

    # The emulator commits on this machine's clock: once it has passed the announced time, the
    # same headers are the scheduled run's delivery.
    wait_until(lambda: datetime.now(UTC) > announced, timeout=60, what="the announced time to pass")
    assert outcome(deliver(server, headers=headers)) == (200, "executed", "scheduled")
    assert outcome(deliver(server, headers=headers)) == (200, "duplicate_completed", "scheduled")

    assert len(executions(db, forced.run_id)) == 1
    assert len(executions(db, scheduled.run_id)) == 1
    records = {doc.id: doc.to_dict() for doc in db.collection("scheduler_runs").stream()}
    assert {run_id: record["trigger"] for run_id, record in records.items()} == {
        forced.run_id: "forced",
        scheduled.run_id: "scheduled",
    }
    assert all(record["status"] == "completed" for record in records.values())


def test_a_run_forced_30_seconds_ahead_runs_once_however_often_delivered(start_server, db):
    server = start_server()
    headers = {**HEADERS, SCHEDULE_TIME_HEADER: format_rfc3339(ahead_by(30))}
    replies = [outcome(deliver(server, headers=headers)) for _ in range(3)]
    assert replies == [(200, "executed", "forced")] + [(200, "duplicate_completed", "forced")] * 2
    forced = run_key_from_headers(headers).as_triggered(Trigger.FORCED)
    assert len(executions(db, forced.run_id)) == 1
    assert not db.collection("scheduler_runs").document(run_key_from_headers(headers).run_id).get().exists


def test_a_delivery_older_than_the_starting_deadline_is_skipped_late_with_no_execution(
    start_server, db, log_path
):
    server = start_server(**jobs_env(starting_deadlines={"nightly": 60}))
    first = deliver(server)  # HEADERS' ScheduleTime is months ago
    assert (first.status_code, first.json()["outcome"]) == (200, "skipped_late")
    assert "after its ScheduleTime" in first.json()["error"]
    again = deliver(server)
    assert (again.status_code, again.json()["outcome"]) == (200, "skipped_late")
    assert executions(db) == []
    record = run_record(db).to_dict()
    assert (record["status"], record["result"]) == ("completed", "skipped_late")

    def skipped_line() -> Any:
        for line in log_path.read_text().splitlines():
            if line.startswith("{") and (entry := json.loads(line)).get("outcome") == "skipped_late":
                return entry
        return None

    line = wait_until(skipped_line, timeout=30, what="the skipped_late log line")
    assert (line["run_id"], line["starting_deadline_s"]) == (RUN_ID, 60)
    assert line["late_by_s"] > 60 * 60 * 24

    on_time = {**HEADERS, SCHEDULE_TIME_HEADER: format_rfc3339(ahead_by(-1))}
    assert outcome(deliver(server, headers=on_time)) == (200, "executed", "scheduled")


@pytest.mark.skipif(
    shutil.which("faketime") is None,
    reason="needs faketime (Debian package faketime; make test installs it as root or with sudo)",
)
@pytest.mark.parametrize("offset", ["+7200s", "-7200s"])
def test_an_instance_whose_clock_is_hours_off_still_tells_forced_from_scheduled(
    function_servers, emulator_host, project, db, offset
):
    skewed = function_servers(server_env(emulator_host, project), launcher=("faketime", "-f", offset))
    forced_headers = {**HEADERS, SCHEDULE_TIME_HEADER: format_rfc3339(ahead_by(60))}
    scheduled_headers = {**HEADERS, SCHEDULE_TIME_HEADER: format_rfc3339(ahead_by(-1))}
    assert outcome(deliver(skewed, headers=forced_headers)) == (200, "executed", "forced")
    assert outcome(deliver(skewed, headers=scheduled_headers)) == (200, "executed", "scheduled")
    forced = run_key_from_headers(forced_headers)
    scheduled = run_key_from_headers(scheduled_headers)
    runs = db.collection("scheduler_runs")
    assert not runs.document(forced.run_id).get().exists  # the forced run's scheduled id stays free
    assert not runs.document(scheduled.as_triggered(Trigger.FORCED).run_id).get().exists
    assert len(executions(db, forced.as_triggered(Trigger.FORCED).run_id)) == 1
    assert len(executions(db, scheduled.run_id)) == 1
