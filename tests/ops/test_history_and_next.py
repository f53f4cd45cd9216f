"""`ops history` and `ops next` across a daylight-saving change in the job's zone: history on
the emulator's ledger, written by the ledger itself; next from the config alone, and in
agreement with the audit's own fire times for every job of the template's stacks over a year."""

from __future__ import annotations

import dataclasses
import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from exactly_once.audit.schedule import fires
from exactly_once.delivery.scheduler_request import RunKey, Trigger
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from infra.plan.audit_job import audited_jobs, with_audit_job
from ops.__main__ import run as run_cli
from ops.context import StackContext, UserError
from ops.history import history
from ops.next_runs import next_runs, show_next
from tests.support.stacks import FIXTURE_STACKS, fixture_stack, with_job

# A job at 02:30 in Berlin: no run on the day clocks go forward (02:30 never happens), and one
# run with two possible instants on the day they go back (02:30 happens twice).
JOB = "nightly-report"
SCHEDULE = "30 2 * * *"
ZONE = "Europe/Berlin"
FALL_BACK = datetime(2026, 10, 25, tzinfo=UTC)
SPRING_FORWARD = datetime(2027, 3, 28, tzinfo=UTC)


def _context(firestore_project: str = "unused") -> StackContext:
    settings = with_job(fixture_stack("dev"), JOB, schedule=SCHEDULE, time_zone=ZONE)
    settings = dataclasses.replace(settings, retention_seconds=4 * 86400)
    return StackContext("dev", with_audit_job(settings), firestore_project, "(default)")


def test_next_marks_the_changes_of_offset_and_the_repeated_wall_time() -> None:
    runs = next_runs(SCHEDULE, ZONE, FALL_BACK - timedelta(days=1), 4)
    assert [(run.fire.instant.isoformat(), run.local.isoformat()) for run in runs] == [
        ("2026-10-24T00:30:00+00:00", "2026-10-24T02:30:00+02:00"),
        ("2026-10-25T00:30:00+00:00", "2026-10-25T02:30:00+02:00"),
        ("2026-10-26T01:30:00+00:00", "2026-10-26T02:30:00+01:00"),
        ("2026-10-27T01:30:00+00:00", "2026-10-27T02:30:00+01:00"),
    ]
    assert runs[1].fire.repeated == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
    assert [run.offset_changed_from for run in runs] == [None, None, timedelta(hours=2), None]

    spring = next_runs(SCHEDULE, ZONE, SPRING_FORWARD - timedelta(days=1), 2)
    assert [run.local.isoformat() for run in spring] == [
        "2027-03-27T02:30:00+01:00",
        "2027-03-29T02:30:00+02:00",  # the 28th's 02:30 never happens
    ]
    assert spring[1].offset_changed_from == timedelta(hours=1)


def test_next_through_the_cli_in_text_and_json() -> None:
    out = io.StringIO()
    show_next(_context(), out, job=JOB, count=3, after=FALL_BACK, as_json=False)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"job {JOB}  (schedule '{SCHEDULE}' in {ZONE})"
    assert lines[2].startswith("2026-10-25T00:30:00Z  2026-10-25T02:30:00+02:00  (a wall time the change")
    assert "may deliver it at 2026-10-25T01:30:00Z instead" in lines[2]
    assert lines[3] == (
        "2026-10-26T01:30:00Z  2026-10-26T02:30:00+01:00  "
        "(daylight saving: UTC offset +02:00 -> +01:00 since the previous run)"
    )

    out = io.StringIO()
    argv = ["next", "--stack", "dev", "--stacks-dir", str(FIXTURE_STACKS), "--job", JOB, "--json"]
    assert run_cli([*argv, "--count", "2", "--after", "2026-10-24T12:00:00Z"], out) == 0
    document = json.loads(out.getvalue())  # nothing before it: no ledger line
    assert (document["job"], document["schedule"], document["time_zone"]) == (JOB, "0 3 * * *", ZONE)
    assert document["runs"][0] == {  # 03:00 comes after the change back: marked on its first run
        "utc": "2026-10-25T02:00:00Z",
        "local": "2026-10-25T03:00:00+01:00",
        "utc_offset": "+01:00",
        "offset_changed_from": "+02:00",
        "repeated_at": None,
    }
    with pytest.raises(UserError, match="--count: expected 1 to 10000 runs, got 0"):
        show_next(_context(), io.StringIO(), job=JOB, count=0, after=FALL_BACK, as_json=False)


def test_next_agrees_with_the_audits_fire_times_for_every_job_over_a_year() -> None:
    """A year in every zone with daylight saving, where a second reading of a schedule could
    go wrong; a month in a zone without (Etc/UTC: no offset changes, nothing to mark), since
    a year of a job every 15 minutes is 35,040 steps of the cron walk for each side."""
    start = datetime(2026, 12, 1, tzinfo=UTC)
    distinct = {
        (job.schedule, job.time_zone)
        for stack in ("dev", "prod")
        for job in audited_jobs(with_audit_job(fixture_stack(stack)))
    }
    assert any(zone != "Etc/UTC" for _, zone in distinct)  # a zone with daylight saving among them
    for schedule, zone in sorted(distinct):
        until = start + timedelta(days=365 if zone != "Etc/UTC" else 31)
        expected = fires(schedule, zone, start + timedelta(seconds=1), until)
        listed = next_runs(schedule, zone, start, len(expected) + 1)
        assert [run.fire for run in listed[:-1]] == expected, (schedule, zone)
        assert listed[-1].fire.instant > until


def test_history_across_the_change_back_on_the_ledger(project: str) -> None:
    context = _context(project)
    job = context.audited(context.job(JOB))
    ledger = RunLedger(
        FirestoreRunStore(context.firestore(), context.settings.runs_collection),
        lease=timedelta(seconds=30),
        retention=timedelta(days=400),
    )

    def key(at: datetime, trigger: Trigger = Trigger.SCHEDULED) -> RunKey:
        return RunKey(context.project, context.location, job.name, at, trigger)

    ledger.complete(ledger.claim(key(datetime(2026, 10, 23, 0, 30, tzinfo=UTC)), "first"))
    ledger.claim(key(datetime(2026, 10, 24, 0, 30, tzinfo=UTC)), "crashed")  # never completed
    # The repeated 02:30, delivered at its second instant (CET): the same run.
    ledger.complete(ledger.claim(key(datetime(2026, 10, 25, 1, 30, tzinfo=UTC)), "second-instant"))
    ledger.complete(ledger.claim(key(datetime(2026, 10, 25, 9, 0, tzinfo=UTC), Trigger.FORCED), "manual"))

    out = io.StringIO()
    until = datetime(2026, 10, 26, 12, 0, tzinfo=UTC)
    history(context, out, job=JOB, until=until, as_json=True)
    document = json.loads(out.getvalue())
    runs = [
        (run["schedule_time"], run["schedule_time_local"], run["outcome"], run["attempt_id"])
        for run in document["runs"]
    ]
    assert runs == [
        ("2026-10-26T01:30:00Z", "2026-10-26T02:30:00+01:00", "missed", None),
        ("2026-10-25T01:30:00Z", "2026-10-25T02:30:00+01:00", "completed", "second-instant"),
        ("2026-10-24T00:30:00Z", "2026-10-24T02:30:00+02:00", "missed", "crashed"),
        ("2026-10-23T00:30:00Z", "2026-10-23T02:30:00+02:00", "completed", "first"),
    ]
    completed = document["runs"][1]
    assert completed["duration_seconds"] is not None and completed["duration_seconds"] >= 0
    assert document["runs"][2]["detail"] == "an attempt claimed it (attempt crashed) but none completed it"
    assert document["manual_runs"] == []  # claimed now, on Firestore's clock: after `until`

    out = io.StringIO()
    history(context, out, job=JOB, last=1, as_json=True)
    manual = json.loads(out.getvalue())["manual_runs"]
    assert [(run["trigger"], run["attempt_id"], run["schedule_time"]) for run in manual] == [
        ("forced", "manual", "2026-10-25T09:00:00Z")
    ]

    out = io.StringIO()
    history(context, out, job=JOB, until=until, last=2)
    lines = out.getvalue().splitlines()
    assert lines[:2] == [
        f"job {JOB}  (schedule '{SCHEDULE}' in {ZONE})",
        "  2026-10-26T01:30:00Z  2026-10-26T02:30:00+01:00  missed  (no delivery reached the ledger)",
    ]
    completed_line = "  2026-10-25T01:30:00Z  2026-10-25T02:30:00+01:00  completed  attempt=second-instant"
    assert lines[2].startswith(completed_line + "  duration=")
    assert len(lines) == 3
