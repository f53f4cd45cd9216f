"""`ops backfill --since/--until`, and what `ops audit` and `ops status` say of paused jobs and
of runs the audit delivered again: on the real function server and the emulator."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from exactly_once.audit.config import CatchupRuns
from exactly_once.audit.schedule import fire_times
from exactly_once.delivery.scheduler_request import format_rfc3339
from infra.settings.environment import function_environment
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.samples import DEMO_JOB
from ops import ledger_view
from ops.context import StackContext
from ops.exit_codes import ExitCode
from tests.ops.conftest import STACK, Cli, DevFunction
from tests.ops.test_catchup import (
    WINDOW_SECONDS,
    _audited,
    _catching_up,
    _deliver_all,
    _executed_times,
    _serve,
)
from tests.support.audits import (
    audited,
    closed_fires,
    judged_span,
    latest_fire,
    stack_audit,
    windows_closed_in,
)
from tests.support.clock import SESSION_DAY
from tests.support.stack_tables import audit_table_env
from tests.support.stacks import demo_job, kind_sample_minutes, with_job


def _day_at(hour: int, minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=2)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _stamp(hour: int, minute: int) -> str:
    return format_rfc3339(_day_at(hour, minute))


def _context(function: DevFunction, project: str) -> StackContext:
    return StackContext(STACK, function.settings, project, "(default)")


def test_backfill_of_a_range_delivers_each_missed_run_once(dev_function: DevFunction, cli: Cli) -> None:
    job = dev_function.demo
    for minute in (0, 45):
        assert dev_function.deliver(job, _day_at(10, minute)).json()["outcome"] == "executed"
    window = ["--job", job.name, "--since", _stamp(10, 0), "--until", _stamp(10, 50)]
    url = ["--url", dev_function.server.url]

    first = cli("backfill", *window, "--only-missed", *url)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 of 4 scheduled missed runs to deliver" in first.stdout
    delivered = [line for line in first.stdout.splitlines() if "  delivered: " in line]
    assert [line.split()[0] for line in delivered] == [_stamp(10, 15), _stamp(10, 30)]
    assert all("outcome executed" in line for line in delivered)
    assert sum(1 for line in first.stdout.splitlines() if "  not delivered: completed" in line) == 2

    again = cli("backfill", *window, "--only-missed", *url)
    assert again.returncode == 0 and "0 of 4 scheduled missed runs to deliver" in again.stdout
    # Without --only-missed every run is sent, and the ledger answers the completed ones.
    every = cli("backfill", *window, *url)
    assert every.returncode == 0, every.stderr
    assert every.stdout.count("outcome duplicate_completed") == 4
    assert sorted(_executed_times(dev_function).values()) == [1, 1, 1, 1]


def test_backfill_range_mistakes_are_usage_errors(dev_function: DevFunction, cli: Cli) -> None:
    job = dev_function.demo.name
    for args, problem in (
        (["--since", _stamp(10, 0)], "backfill needs --at (one run), or --since and --until"),
        (["--at", _stamp(10, 0), "--since", _stamp(10, 0)], "--at names one run"),
        (["--since", _stamp(10, 0), "--until", "2999-01-01T00:00:00Z"], "is in the future"),
        # A deployed dev stack has no catch-up queue: nothing is sent from this machine.
        (
            ["--since", _stamp(10, 0), "--until", _stamp(10, 50), "--url", "https://x.run.app"],
            "no catch-up queue",
        ),
    ):
        result = cli("backfill", "--job", job, *args)
        assert result.returncode == ExitCode.USAGE_ERROR, result.stdout + result.stderr
        assert problem in result.stderr and "Traceback" not in result.stderr
    assert _executed_times(dev_function) == {}


def test_audit_and_status_show_a_paused_job_as_paused(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    settings = with_job(dev_settings, DEMO_JOB, paused=True)
    demo = demo_job(settings)
    # The stack recorded when the job's `paused` key changed: just after its 10:00 run.
    paused_at = {demo.name: _day_at(10, 5)}
    function = _serve_paused(function_servers, settings, paused_at, emulator_host, project, db, log_path)
    assert function.deliver(demo, _day_at(10, 0)).json()["outcome"] == "executed"  # before the pause

    out = io.StringIO()
    code = ledger_view.audit(
        _context(function, project), out, job=demo.name, since=_day_at(10, 0), until=_day_at(10, 50)
    )
    assert code == ExitCode.OK, out.getvalue()
    rows = [line for line in out.getvalue().splitlines() if line.startswith(_stamp(10, 0)[:11])]
    assert [row.split()[2] for row in rows] == ["completed", "paused", "paused", "paused"]
    assert "4 expected runs, 0 missed, 3 paused" in out.getvalue()

    status = io.StringIO()
    ledger_view.status(_context(function, project), status, job=demo.name, until=_day_at(10, 50))
    assert f"job {demo.name}  (schedule '*/15 * * * *' in Etc/UTC)  PAUSED" in status.getvalue()

    # The scheduled audit of 11:05 (run here, on that clock) logs no missed run and raises no
    # alert for them, and keeps the pause for the audits after it.
    audits = stack_audit(settings, db, pause_changed_at=paused_at)
    audit = audits.run(_day_at(11, 5))
    # Each hourly kind sample's run (the workflow job's 10:30, the BigQuery job's 10:45), and the
    # audit's own 10:05: none of the paused job's.
    samples = kind_sample_minutes(settings)
    assert audit.missed() == {
        *((settings.scheduler_job_id(name), _stamp(10, minute)) for name, minute in samples.items()),
        (settings.scheduler_job_id(AUDIT_JOB_NAME), _stamp(10, 5)),
    }
    assert audit.output["missed"] == 1 + len(samples)
    assert settings.scheduler_job_id(demo) not in {job for job, _ in audit.missed()}
    (summary,) = audit.events("missed_run_audit")
    assert summary["paused"] == 3  # 10:15, 10:30, 10:45
    # A first audit: the job may have been paused and resumed unseen before the change the stack
    # recorded, so the pause it keeps reaches as far back as it looks (the retention).
    kept_since = _day_at(11, 5) - timedelta(seconds=settings.retention_seconds)
    assert audit.output["pauses"] == {settings.scheduler_job_id(demo): [[format_rfc3339(kept_since), None]]}

    # Served, the audit judges the hour up to its claim (now): every run of the paused job
    # in it is paused, and only the other jobs' runs are missed.
    config = audits.config  # the audit configuration the served function reads
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    scheduled = latest_fire(audited(config, audits.job_name), datetime.now(UTC)) - timedelta(hours=3)
    served = function.deliver(audit_job, scheduled).json()
    assert served["outcome"] == "executed"
    in_span = windows_closed_in(config.jobs, *judged_span(served["output"]))
    of_demo = {run for run in in_span if run[0] == settings.scheduler_job_id(demo)}
    assert len(of_demo) == 4  # every 15 minutes
    lines = [line for line in function.log_lines() if line.get("audit_run_id") == served["run_id"]]
    missed = {(line["job"], line["schedule_time"]) for line in lines if line.get("event") == "missed_run"}
    assert missed == in_span - of_demo
    (summary,) = [line for line in lines if line.get("event") == "missed_run_audit"]
    assert (summary["paused"], served["output"]["paused"]) == (4, 4)


def test_ops_audit_shows_each_catchup_delivery(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    """The served audit (its clock: its claim, now) delivers the one run lost in the last hours
    again; `ops audit` shows that run completed, and by which audit run it was delivered."""
    settings = _catching_up(dev_settings, CatchupRuns.ALL)
    function = _serve(function_servers, settings, emulator_host, project, db, log_path)
    demo = function.demo
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    now = datetime.now(UTC)
    (lost,) = closed_fires(_audited(settings, demo), now, 1)
    window = fire_times(demo.schedule, demo.time_zone, now - timedelta(seconds=WINDOW_SECONDS + 60), now)
    _deliver_all(function, demo, [t for t in window if t != lost])
    scheduled = latest_fire(_audited(settings, audit_job), now)
    audit = function.deliver(audit_job, scheduled).json()
    assert audit["outcome"] == "executed"
    assert [entry["schedule_time"] for entry in audit["output"]["caught_up"]] == [format_rfc3339(lost)]

    # The lost run and the three before it (the audit run lies in that range: lost is at most
    # 30 minutes old, the audit run at most an hour).
    since, until = lost - timedelta(minutes=45), lost + timedelta(minutes=5)
    assert since <= scheduled
    out = io.StringIO()
    code = ledger_view.audit(_context(function, project), out, job=demo.name, since=since, until=until)
    assert code == ExitCode.OK, out.getvalue()
    catchup_rows = [line for line in out.getvalue().splitlines() if "  catch-up: " in line]
    assert len(catchup_rows) == 1
    stamp = format_rfc3339(lost)
    assert catchup_rows[0].startswith(f"{stamp}  {settings.scheduler_job_id(demo)}  catch-up: ")
    assert f"delivered again by the audit of {format_rfc3339(scheduled)}" in catchup_rows[0]
    assert f"{stamp}  {settings.scheduler_job_id(demo)}  completed" in out.getvalue()
    assert "4 expected runs, 0 missed, 0 paused, 1 delivered again" in out.getvalue()


def _serve_paused(
    function_servers, settings, pause_changed_at, emulator_host, project, db, log_path
) -> DevFunction:
    """The dev function, told (as the stack tells it) when each paused job's pause began."""
    env = {
        **function_environment(settings),
        **audit_table_env(settings, pause_changed_at=pause_changed_at),
        "GOOGLE_CLOUD_PROJECT": project,
        "FIRESTORE_DATABASE": "(default)",
        "FIRESTORE_EMULATOR_HOST": emulator_host,
    }
    return DevFunction(settings, function_servers(env), db, log_path)
