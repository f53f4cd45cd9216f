"""The operator's loop on a real function and ledger: audit finds the undelivered run,
backfill runs it exactly once, audit then finds nothing; status shows the job."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import exactly_once
from exactly_once.delivery.scheduler_request import run_key_from_headers
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from infra.config.schema import REPO_ROOT
from infra.plan.audit_job import with_audit_job
from infra.plan.headers import delivery_headers
from infra.settings.jobs import AUDIT_JOB_NAME
from localrun.server_forks import run_module
from ops import ledger_view
from ops.exit_codes import ExitCode
from ops.smoke import DEFAULT_WAIT_SECONDS
from tests.ops.conftest import STACK, Cli, DevFunction, serve_dev_function
from tests.ops.fakes import RecordingFunction
from tests.support.clock import SESSION_DAY
from tests.support.optional import needs_proxy_kinds
from tests.support.stacks import FIXTURE_STACKS, demo_job, fixture_stack


def _past_day_at(hour: int, minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=2)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _missed_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.split("  ")[2:3] == ["missed"]]


def test_audit_backfill_audit(dev_function: DevFunction, cli: Cli) -> None:
    job = dev_function.demo
    deployed_id = dev_function.settings.scheduler_job_id(job)  # what the ledger and logs name it by
    assert job.schedule == "*/15 * * * *"  # the times below are this schedule's
    for minute in (0, 15, 45):
        assert dev_function.deliver(job, _past_day_at(10, minute)).json()["outcome"] == "executed"
    window = ["--job", job.name, "--since", _stamp(10, 0), "--until", _stamp(10, 50)]

    audit = cli("audit", *window)
    assert audit.returncode == 1, audit.stderr
    assert "run records are deleted by the TTL 86400s after they are claimed" in audit.stdout
    assert _missed_lines(audit.stdout) == [
        f"{_stamp(10, 30)}  {deployed_id}  missed  (no delivery reached the ledger)"
    ]
    completed = [line for line in audit.stdout.splitlines() if "  completed" in line]
    assert [line.split()[0] for line in completed] == [_stamp(10, 0), _stamp(10, 15), _stamp(10, 45)]

    first = cli("backfill", "--job", job.name, "--at", _stamp(10, 30), "--url", dev_function.server.url)
    assert first.returncode == 0, first.stderr
    assert "outcome executed" in first.stdout
    again = cli("backfill", "--job", job.name, "--at", _stamp(10, 30), "--url", dev_function.server.url)
    assert again.returncode == 0, again.stderr
    assert "outcome duplicate_completed" in again.stdout
    off_schedule = cli(
        "backfill", "--job", job.name, "--at", _stamp(10, 31), "--url", dev_function.server.url
    )
    assert off_schedule.returncode == 2
    assert "not a fire time" in off_schedule.stderr and "Traceback" not in off_schedule.stderr

    schedule_times = sorted(str(e["schedule_time"]) for e in dev_function.executions(job))
    assert len(schedule_times) == 4, "each of the four runs executed exactly once"
    assert len(set(schedule_times)) == 4

    after = cli("audit", *window)
    assert after.returncode == 0, after.stdout + after.stderr
    assert _missed_lines(after.stdout) == []
    assert "4 expected runs, 0 missed" in after.stdout

    status = cli("status", "--job", job.name, "--until", _stamp(10, 50), "--limit", "4")
    assert status.returncode == 0, status.stderr
    assert f"job {job.name}" in status.stdout
    run_lines = [line for line in status.stdout.splitlines() if line.startswith("  ")]
    assert len(run_lines) == 4
    assert all("status=completed" in line and "result=succeeded" in line for line in run_lines)
    assert all("duration=" in line for line in run_lines)


def test_audit_counts_a_run_another_function_recorded_as_missed(
    dev_function: DevFunction, cli: Cli, function_servers, emulator_host, project, db, log_path
) -> None:
    """The other function shares the runs collection and ran the 10:30 run; its record says
    completed, but the stack's function refuses that run on every delivery."""
    # Served as Cloud Run serves it: its service is the target it records with each run.
    dev_function = serve_dev_function(
        function_servers, dev_function.settings, emulator_host, project, db, log_path, "eos-dev-handler"
    )
    other = serve_dev_function(
        function_servers, dev_function.settings, emulator_host, project, db, log_path, "crm-handler"
    )
    job = dev_function.demo
    deployed_id = dev_function.settings.scheduler_job_id(job)
    assert other.deliver(job, _past_day_at(10, 30)).json()["outcome"] == "executed"
    for minute in (0, 15, 45):
        assert dev_function.deliver(job, _past_day_at(10, minute)).json()["outcome"] == "executed"
    window = ["--job", job.name, "--since", _stamp(10, 0), "--until", _stamp(10, 50)]

    # Before any audit run is recorded, the CLI cannot know this stack's target, and says so.
    blind = cli("audit", *window)
    assert blind.returncode == 0, blind.stdout + blind.stderr
    assert "note: no run of the stack's missed-run audit is recorded" in blind.stdout

    audit_job = next(j for j in dev_function.settings.jobs if j.name == AUDIT_JOB_NAME)
    assert dev_function.deliver(audit_job, _past_day_at(10, 5)).json()["outcome"] == "executed"
    audit = cli("audit", *window)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    ours, theirs = "eos-dev-handler", "crm-handler"
    assert f"this stack's function records target {ours}" in audit.stdout
    (missed,) = _missed_lines(audit.stdout)
    assert missed.startswith(
        f"{_stamp(10, 30)}  {deployed_id}  missed  (recorded by target {theirs}, not this stack's {ours}: "
    )
    assert "4 expected runs, 1 missed" in audit.stdout

    status = cli("status", "--job", job.name, "--until", _stamp(10, 50), "--limit", "4")
    (line,) = [line for line in status.stdout.splitlines() if line.startswith(f"  {_stamp(10, 30)}")]
    assert f"target={theirs}" in line and line.endswith("-> missed"), line


def test_backfill_asks_the_function_to_decide_from_the_ledger(cli: Cli) -> None:
    """`Cache-Control: no-cache` on the delivery: a warm instance's memory of completed runs
    must not answer a re-delivery an operator asked for. The rest is what Cloud Scheduler
    would have sent for that run."""
    function = RecordingFunction().start()
    try:
        settings = with_audit_job(fixture_stack("dev"))
        job = demo_job(settings)
        at = _past_day_at(10, 30)
        result = cli("backfill", "--job", job.name, "--at", _stamp(10, 30), "--url", function.url)
    finally:
        function.stop()
    assert result.returncode == 0, result.stderr
    [(headers, body)] = function.deliveries
    assert headers["cache-control"] == "no-cache"
    expected = {name.lower(): value for name, value in delivery_headers(settings, job, at).items()}
    assert {name: headers.get(name) for name in expected} == expected
    assert body == (job.body_bytes() or b"")


# What Google's front end answers for a request its ingress settings stop before the function.
NOT_FOUND_PAGE = b"""<html><head><title>404 Page not found</title></head><body><h1>Error: Page not found</h1>
<h2>The requested URL was not found on this server.</h2></body></html>"""


@pytest.mark.parametrize(
    ("status", "explained"),
    [
        (404, "its ingress ALLOW_INTERNAL_ONLY refuses callers outside the project's VPC networks"),
        (403, "Cloud Run refused the ID token; the invoker account needs roles/run.invoker"),
    ],
)
def test_an_answer_that_is_not_the_functions_is_explained_in_one_line(
    cli: Cli, status: int, explained: str
) -> None:
    front_end = RecordingFunction(status=status, page=NOT_FOUND_PAGE).start()
    try:
        args = ("--job", "demo-every-15-minutes", "--at", _stamp(10, 30), "--url", front_end.url)
        result = cli("backfill", *args)
    finally:
        front_end.stop()
    assert result.returncode == ExitCode.CLOUD_UNREACHABLE  # the function never saw the run
    (line,) = result.stdout.splitlines()[1:]  # after the line naming the ledger
    assert line.startswith(f"backfill of demo-every-15-minutes at {_stamp(10, 30)}: HTTP {status} from ")
    assert explained in line and "<" not in line, line


def test_redo_deletes_a_completed_runs_record_and_runs_it_again(dev_function: DevFunction, cli: Cli) -> None:
    job = dev_function.demo
    at = _past_day_at(10, 30)
    first = dev_function.deliver(job, at).json()
    assert first["outcome"] == "executed"
    # The instance remembers the completed run; a plain re-delivery is a duplicate.
    assert dev_function.deliver(job, at).json()["outcome"] == "duplicate_completed"

    redo = cli("redo", "--job", job.name, "--at", _stamp(10, 30), "--url", dev_function.server.url)

    assert redo.returncode == 0, redo.stdout + redo.stderr
    assert redo.stdout.splitlines()[1:] == [
        f"redo of the run of {job.name} at {_stamp(10, 30)}: deleted its record (result succeeded, "
        f"attempt {first['attempt_id']})",
        f"redo of {job.name} at {_stamp(10, 30)}: HTTP 200, outcome executed: job ran",
        f"redo of {job.name} at {_stamp(10, 30)}: output {json.dumps(first['output'], sort_keys=True)}",
    ]
    assert len([e for e in dev_function.executions(job) if e["schedule_time"] == at]) == 2
    fresh = cli("redo", "--job", job.name, "--at", _stamp(10, 45), "--url", dev_function.server.url)
    assert fresh.returncode == 0 and "it has no record, nothing to delete" in fresh.stdout


def test_redo_leaves_a_run_in_progress_alone(dev_function: DevFunction, cli: Cli) -> None:
    job = dev_function.demo
    at = _past_day_at(11, 0)
    headers = delivery_headers(dev_function.settings, job, at)
    ledger = RunLedger(
        FirestoreRunStore(dev_function.db, "scheduler_runs"),
        lease=timedelta(minutes=10),
        retention=timedelta(days=1),
    )
    ledger.claim(run_key_from_headers(headers), "live-attempt", fingerprint="", target="")
    function = RecordingFunction().start()
    try:
        redo = cli("redo", "--job", job.name, "--at", _stamp(11, 0), "--url", function.url)
    finally:
        function.stop()
    assert redo.returncode == 1
    assert "not done, the run is leased (attempt live-attempt)" in redo.stdout
    assert function.deliveries == []
    record = FirestoreRunStore(dev_function.db, "scheduler_runs").get(
        run_key_from_headers(headers).run_id, timeout=30
    )
    assert record is not None and record.fields["attempt_id"] == "live-attempt"


def test_status_lists_every_job(dev_function: DevFunction, cli: Cli) -> None:
    status = cli("status")
    assert status.returncode == 0, status.stderr
    for job in dev_function.settings.jobs:
        assert f"job {job.name}  " in status.stdout


def test_user_errors_exit_2_with_one_line(cli: Cli) -> None:
    for args, expected in (
        (("audit", "--job", "no-such-job"), "has no job 'no-such-job'"),
        (("audit", "--since", "yesterday"), "--since: 'yesterday' is not an RFC 3339 timestamp"),
        (("audit", "--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z"), "before it starts"),
        (("backfill", "--job", "nightly-report", "--at", "2026-01-01T03:00:00Z"), "not a fire time"),
        (("backfill", "--job", "demo-every-15-minutes"), "--at"),
        (("status", "--limit", "0"), "--limit"),
        # What only the deployed stack knows, without the Pulumi CLI to ask: say which flag.
        (("backfill", "--job", "demo-every-15-minutes", "--at", "2026-01-01T10:30:00Z"), "pass --url"),
        (
            (
                "backfill",
                "--job",
                "demo-every-15-minutes",
                "--at",
                "2026-01-01T10:30:00Z",
                "--url",
                "https://x.run.app",
            ),
            "pass --invoker",
        ),
    ):
        result = cli(*args, extra_env={"PATH": "/nonexistent"})
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert expected in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


@needs_proxy_kinds
def test_backfilling_the_sample_workflow_job_asks_for_its_body(cli: Cli) -> None:
    """Its body names the workflow the stack deployed, which only the deployed stack knows: a
    user error naming the flag, as for the other values only the deployed stack knows."""
    args = ("backfill", "--job", "workflow-proxy-demo", "--at", "2026-01-01T10:30:00Z")
    result = cli(*args, "--url", "http://127.0.0.1:9/", extra_env={"PATH": "/nonexistent"})
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "pass --body" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_without_credentials_nothing_is_sent_and_the_fix_is_named(cli: Cli) -> None:
    no_credentials = {"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/key.json"}
    at = ("--job", "demo-every-15-minutes", "--at", "2026-01-01T10:30:00Z")
    backfill = cli(
        "backfill",
        *at,
        "--url",
        "https://x.a.run.app",
        "--invoker",
        "i@p.iam.gserviceaccount.com",
        extra_env=no_credentials,
    )
    assert backfill.returncode == ExitCode.CLOUD_UNREACHABLE
    assert "cannot mint an ID token as i@p.iam.gserviceaccount.com" in backfill.stderr
    assert "roles/iam.serviceAccountTokenCreator" in backfill.stderr and "Traceback" not in backfill.stderr

    smoke = cli(
        "smoke",
        "--wait",
        "1",
        "--scheduler-endpoint",
        "https://scheduler.invalid",
        "--firestore-admin-endpoint",
        "https://firestore.invalid",
        extra_env=no_credentials,
    )
    assert smoke.returncode == ExitCode.CLOUD_UNREACHABLE
    fails = [line for line in smoke.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 2 and all("gcloud auth application-default login" in line for line in fails)


def test_an_unknown_stack_is_a_user_error_naming_the_stacks_there_are(cli: Cli) -> None:
    result = cli("status", stack="staging")
    assert result.returncode == ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert result.stderr == (
        f"python -m ops: error: no stack 'staging': {FIXTURE_STACKS} has no Pulumi.staging.yaml; "
        "its stacks are: dev, prod\n"
    )
    assert result.stdout == ""


def test_a_folder_without_stacks_says_so(cli: Cli, tmp_path: Path) -> None:
    result = dataclasses.replace(cli, stacks_dir=tmp_path)("status", stack="dev")
    assert result.returncode == ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert result.stderr == (
        f"python -m ops: error: no stack 'dev': {tmp_path} has no Pulumi.dev.yaml, nor any "
        "Pulumi.<stack>.yaml (--stacks-dir names the folder to read)\n"
    )


def test_every_command_names_the_ledger_it_reads_first(dev_function: DevFunction, cli: Cli) -> None:
    """In the emulator, the project is the one given (a local run keeps its documents in a
    project of its own): the line says which, so an empty answer is not taken for the stack's."""
    settings = dev_function.settings
    header = (
        f"stack {STACK}: ledger in project {cli.firestore_project}, database (default), "
        f"on the Firestore emulator at {cli.emulator_host}"
    )
    assert settings.database_name != "(default)" and settings.project != cli.firestore_project
    for command in (("status",), ("audit",)):
        result = cli(*command)
        assert result.stdout.splitlines()[0] == header, (command, result.stdout, result.stderr)


@pytest.mark.parametrize(
    "command",
    [
        ("status",),
        ("audit",),
        ("resume", "--job", "demo-every-15-minutes"),
        ("backfill", "--job", "demo-every-15-minutes", "--at", "2026-01-01T10:30:00Z"),
        ("redo", "--job", "demo-every-15-minutes", "--at", "2026-01-01T10:30:00Z"),
        (
            "run-now",
            "--job",
            "demo-every-15-minutes",
            "--wait",
            "1",
            "--scheduler-endpoint",
            "https://x.invalid",
        ),
        ("smoke", "--wait", "1", "--scheduler-endpoint", "https://x.invalid"),
    ],
)
def test_without_the_emulator_the_first_line_names_the_stacks_own_ledger(command: tuple[str, ...]) -> None:
    settings = with_audit_job(fixture_stack(STACK))
    result = _offline(*command, "--stack", STACK)
    assert result.stdout.splitlines()[:1] == [
        f"stack {STACK}: ledger in project {settings.project}, database {settings.database_name}, "
        "on Google Cloud"
    ], (result.stdout, result.stderr)


def _stamp(hour: int, minute: int) -> str:
    return _past_day_at(hour, minute).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- without Google Cloud: what the CLI says on a machine with no credentials ------------------

NO_CREDENTIALS = {"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/key.json"}


def _offline(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m ops` with no credentials and no emulator: the case on this machine, and on
    an operator's before `gcloud auth application-default login`."""
    env = {name: value for name, value in os.environ.items() if name != "FIRESTORE_EMULATOR_HOST"}
    stacks = ["--stacks-dir", str(FIXTURE_STACKS)] if "--stack" in args else []
    return run_module("ops", [*args, *stacks], {**env, **NO_CREDENTIALS}, REPO_ROOT, timeout=120)


def test_exit_codes_are_distinct_and_listed_in_help_and_docs() -> None:
    assert len({int(code) for code in ExitCode}) == len(ExitCode.__members__) == 4
    assert ExitCode.RUN_PROBLEM not in (ExitCode.USAGE_ERROR, ExitCode.CLOUD_UNREACHABLE)
    operations = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for args in (("--help",), ("audit", "--help"), ("smoke", "--help")):
        result = _offline(*args)
        assert result.returncode == ExitCode.OK, result.stderr
        help_text = " ".join(result.stdout.split())  # the meanings are wrapped
        for code in ExitCode:
            assert f"{code.value} {code.meaning}" in help_text, (args, code)
    for code in ExitCode:
        assert f"| {code.value} | {code.meaning} |" in operations, code


def test_help_shows_the_defaults() -> None:
    status = " ".join(_offline("status", "--help").stdout.split())
    assert f"runs per job (default: {ledger_view.STATUS_RUNS})" in status
    smoke = " ".join(_offline("smoke", "--help").stdout.split())
    assert f"seconds to wait for the run (default: {DEFAULT_WAIT_SECONDS})" in smoke
    # A default stated in words (the stack's own) is not repeated as "(default: None)".
    assert "None" not in status + smoke


def test_version_is_the_projects_and_the_function_packages() -> None:
    with (REPO_ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    result = _offline("--version")
    assert result.returncode == ExitCode.OK, result.stderr
    assert result.stdout.strip() == (
        f"{project['name']} {project['version']} (exactly_once {exactly_once.__version__})"
    )


@pytest.mark.parametrize(
    "command",
    [
        ("status",),
        ("audit",),
        ("smoke",),
        ("history",),
        ("next",),
        ("backfill", "--at", "2026-01-01T10:30:00Z", "--url", "https://x.a.run.app"),
        ("redo", "--at", "2026-01-01T10:30:00Z", "--url", "https://x.a.run.app"),
    ],
)
def test_an_unknown_job_is_named_before_credentials_are_looked_for(command: tuple[str, ...]) -> None:
    result = _offline(*command, "--job", "no-such-job", "--stack", "dev")
    assert result.returncode == ExitCode.USAGE_ERROR, result.stdout + result.stderr
    jobs = ", ".join(job.name for job in with_audit_job(fixture_stack("dev")).jobs)
    assert result.stderr == (
        f"python -m ops: error: stack 'dev' has no job 'no-such-job'; its jobs are: {jobs}\n"
    )
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["status", "audit", "page"])
def test_without_credentials_the_exit_status_is_not_a_missed_run(command: str) -> None:
    result = _offline(command, "--stack", "dev")
    assert result.returncode == ExitCode.CLOUD_UNREACHABLE, result.stdout + result.stderr
    assert "no usable Google credentials" in result.stderr
    assert "gcloud auth application-default login" in result.stderr and "Traceback" not in result.stderr
