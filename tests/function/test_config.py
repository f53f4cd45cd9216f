from __future__ import annotations

import functools
import os
import re

import pytest

from exactly_once import RunContext, exactly_once
from exactly_once.config import SOURCE_ROOT, ConfigError, FunctionConfig, JobTableError, OverlapPolicy
from exactly_once.errors import TerminalJobError
from exactly_once.router import JobRouter
from localrun.function_server import FunctionServer, FunctionServerError
from tests.function import sample_jobs
from tests.support.demo_runs import deliver, executions, run_record
from tests.support.job_tables import jobs_env


def test_defaults_are_usable():
    config = FunctionConfig.from_env({})
    assert config.runs_collection == "scheduler_runs"
    assert config.database == "(default)"
    assert config.lease_seconds < config.retention_seconds


def test_values_are_read():
    config = FunctionConfig.from_env(
        {
            "GOOGLE_CLOUD_PROJECT": "acme",
            "FIRESTORE_DATABASE": "dedup",
            "RUNS_COLLECTION": "runs",
            "LEASE_SECONDS": "70",
            "RETENTION_SECONDS": "3600",
            "JOB_HANDLER": "jobs.noop:do_nothing",
            **jobs_env({"nightly": "jobs.demo:run_demo_job"}),
        }
    )
    assert (config.project, config.database, config.runs_collection) == ("acme", "dedup", "runs")
    assert (config.lease_seconds, config.retention_seconds) == (70, 3600)
    assert config.job_handler == "jobs.noop:do_nothing"
    assert config.job_handlers == {"nightly": "jobs.demo:run_demo_job"}


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"LEASE_SECONDS": "soon"}, "LEASE_SECONDS"),
        ({"LEASE_SECONDS": "0"}, "LEASE_SECONDS"),
        ({"LEASE_SECONDS": "nan"}, "LEASE_SECONDS"),
        ({"RETENTION_SECONDS": "-5"}, "RETENTION_SECONDS"),
        ({"LEASE_SECONDS": "600", "RETENTION_SECONDS": "60"}, "RETENTION_SECONDS"),
        ({"RUNS_COLLECTION": "a/b"}, "RUNS_COLLECTION"),
        ({"FIRESTORE_DATABASE": " "}, "FIRESTORE_DATABASE"),
        ({"JOB_HANDLER": "jobs.demo.run_demo_job"}, "JOB_HANDLER"),
    ],
)
def test_bad_values_name_the_variable(env, variable):
    with pytest.raises(ConfigError) as caught:
        FunctionConfig.from_env(env)
    assert caught.value.variable == variable
    assert variable in str(caught.value)


def _table_file(tmp_path, text: str) -> dict[str, str]:
    path = tmp_path / "job_table.json"
    path.write_text(text, encoding="utf-8")
    return {"JOB_TABLE": str(path)}


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("{not json", "(file)", "not JSON"),
        ('["a"]', "(file)", 'expected {"jobs"'),
        ('{"jobs": ["a"]}', "(file)", 'expected {"jobs"'),
        ('{"jobs": {}, "handlers": {}}', "handlers", "unknown key (expected jobs, names_every_job, audit)"),
        ('{"jobs": {}, "audit": []}', "audit", "expected an object"),
        ('{"jobs": {"": {}}}', "jobs['']", "a job name must not be empty"),
        ('{"jobs": {"a": "skip"}}', "jobs['a']", "expected an object"),
        ('{"jobs": {"a": {"handlers": "x:y"}}}', "jobs['a'].handlers", "unknown key"),
        ('{"jobs": {"a": {"handler": "jobs.demo.run"}}}', "jobs['a'].handler", "not of the form"),
        ('{"jobs": {"a": {"handler": ["jobs.demo:run"]}}}', "jobs['a'].handler", "not of the form"),
        ('{"jobs": {"a": {"overlap": "forbid"}}}', "jobs['a'].overlap", "'forbid' is not one of"),
        ('{"jobs": {"a": {"overlap": 1}}}', "jobs['a'].overlap", "1 is not one of"),
        (
            '{"jobs": {"a": {"starting_deadline_seconds": 0}}}',
            "jobs['a'].starting_deadline_seconds",
            "0 must",
        ),
        *(
            (
                f'{{"jobs": {{"a": {{"pause_after_failures": {value}}}}}}}',
                "jobs['a'].pause_after_failures",
                f"{shown} must be a whole number of runs, at least 1",
            )
            for value, shown in (("0", "0"), ("-1", "-1"), ("1.5", "1.5"), ("true", "True"), ('"3"', "'3'"))
        ),
    ],
)
def test_a_bad_job_table_names_its_key(tmp_path, text, key, problem):
    """What the per-job variables' checks refused, the table's refuse, naming the key."""
    env = _table_file(tmp_path, text)
    with pytest.raises(JobTableError) as caught:
        FunctionConfig.from_env(env)
    assert caught.value.variable == "JOB_TABLE" and caught.value.key == key
    assert f"job table {env['JOB_TABLE']} (JOB_TABLE): {key}: " in str(caught.value)
    assert problem in str(caught.value)


def test_a_missing_job_table_names_the_variable_and_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "job_table.json"
    with pytest.raises(
        ConfigError, match=r"environment variable JOB_TABLE: cannot read .*nowhere/job_table\.json"
    ):
        FunctionConfig.from_env({"JOB_TABLE": str(missing)})


def test_without_a_table_or_a_default_handler_no_job_has_a_handler():
    config = FunctionConfig.from_env({})
    assert (config.job_handler, config.jobs, config.audit) == (None, {}, None)


def test_overlap_policies_are_read_per_job(tmp_path):
    config = FunctionConfig.from_env(jobs_env(overlap={"a": "skip", "b": "wait"}))
    assert config.overlap_for("a") is OverlapPolicy.SKIP
    assert config.overlap_for("b") is OverlapPolicy.WAIT
    assert config.overlap_for("c") is OverlapPolicy.ALLOW
    with pytest.raises(
        ConfigError,
        match=r"\(JOB_TABLE\): jobs\['a'\]\.overlap: 'forbid' is not one of \['allow', 'skip', 'wait'\]",
    ):
        FunctionConfig.from_env(_table_file(tmp_path, '{"jobs": {"a": {"overlap": "forbid"}}}'))


def test_per_job_time_limits_are_read_and_bounded_by_the_function_limit(tmp_path):
    config = FunctionConfig.from_env({"JOB_TIME_LIMIT_SECONDS": "1195", **jobs_env(time_limits={"a": 55})})
    assert (config.time_limit_for("a"), config.time_limit_for("b")) == (55.0, 1195.0)
    for raw, problem in (
        ("1200", r"1200 is above JOB_TIME_LIMIT_SECONDS=1195"),
        ("0", r"0 must be a number of seconds above 0"),
        ('"55"', r"'55' must be"),
        ("true", r"True must be"),
    ):
        env = _table_file(tmp_path, f'{{"jobs": {{"a": {{"time_limit_seconds": {raw}}}}}}}')
        with pytest.raises(ConfigError, match=rf"\(JOB_TABLE\): jobs\['a'\]\.time_limit_seconds: {problem}"):
            FunctionConfig.from_env({"JOB_TIME_LIMIT_SECONDS": "1195", **env})


def test_per_job_starting_deadlines_are_read():
    config = FunctionConfig.from_env(jobs_env(starting_deadlines={"a": 600}))
    assert config.policy_for("a").starting_deadline_seconds == 600.0
    assert config.policy_for("b").starting_deadline_seconds is None


def test_per_job_pauses_after_failures_are_read():
    config = FunctionConfig.from_env(jobs_env(pause_after_failures={"a": 3}))
    assert config.policy_for("a").pause_after_failures == 3
    assert config.pause_after_failures == {"a": 3}
    assert config.policy_for("b").pause_after_failures is None


def test_router_takes_callables_as_well_as_names():
    def nightly(run):
        return "nightly"

    router = JobRouter("jobs.noop:do_nothing", {"nightly": nightly})
    assert router.handler_for("nightly") is nightly


def test_unimportable_handler_names_the_variable():
    with pytest.raises(ConfigError, match=r"JOB_HANDLER: cannot import module 'jobs\.nope'"):
        JobRouter("jobs.nope:run", {})
    with pytest.raises(
        ConfigError, match=r"JOB_TABLE jobs\['nightly'\]\.handler: 'jobs\.demo' has no callable 'nope'"
    ):
        JobRouter("jobs.noop:do_nothing", {"nightly": "jobs.demo:nope"})


def test_a_function_served_with_exactly_once_is_refused_by_name_and_as_a_callable():
    expected = (
        r"JOB_TABLE jobs\['nightly'\]\.handler: served_on_its_own is decorated with @exactly_once, "
        r"which serves it as an HTTP function of its own; the router already runs every handler exactly once"
    )
    with pytest.raises(ConfigError, match=expected):
        JobRouter("jobs.noop:do_nothing", {"nightly": "tests.function.sample_jobs:served_on_its_own"})
    with pytest.raises(ConfigError, match=r"JOB_HANDLER: nightly is decorated with @exactly_once"):

        @exactly_once
        def nightly(run: RunContext) -> None: ...

        JobRouter(nightly, {})  # type: ignore[arg-type]  # mypy refuses it too; a fork may skip mypy
    # Another decorator that wraps the job (functools.wraps) is not mistaken for it.
    timed = functools.wraps(sample_jobs.record_call)(lambda run: sample_jobs.record_call(run))
    assert JobRouter(timed, {}).handler_for("any") is timed


def test_router_picks_per_job_override():
    router = JobRouter("jobs.noop:do_nothing", {"nightly": "jobs.demo:run_demo_job"})
    assert router.handler_for("nightly").__name__ == "run_demo_job"
    assert router.handler_for("other").__name__ == "do_nothing"


def test_a_job_without_a_handler_fails_terminally_naming_the_job():
    """No built-in default: a job the table does not name, with no JOB_HANDLER, is refused by
    name rather than run as some other job."""
    router = JobRouter(None, {"nightly": "jobs.noop:do_nothing"})
    assert router.handler_for("nightly").__name__ == "do_nothing"
    with pytest.raises(
        TerminalJobError, match=r"no handler for job 'eos-dev_forgotten': the job table \(JOB_TABLE\)"
    ):
        router.handler_for("eos-dev_forgotten")


def test_a_served_job_without_a_handler_is_answered_terminally_naming_it(start_server, db):
    """Through a real server: the run is recorded failed (not retried, not run as another job),
    and the record and the reply say which job has no handler."""
    server = start_server(JOB_HANDLER="", **jobs_env({"weekly": "jobs.noop:do_nothing"}))
    reply = deliver(server)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    record = run_record(db).to_dict()
    assert record["result"] == "terminal_failure"
    assert "no handler for job 'nightly'" in record["error"]
    assert executions(db) == []


def test_server_refuses_to_start_and_names_the_variable(tmp_path):
    """Start-up validation is real: the Functions Framework process exits with the message."""
    log = tmp_path / "server.log"
    server = FunctionServer({"LEASE_SECONDS": "ten"}, log)
    with pytest.raises(FunctionServerError):
        server.start()
    assert "environment variable LEASE_SECONDS: 'ten' is not a number of seconds" in log.read_text()


def test_a_relative_job_table_is_found_beside_main_py_whatever_the_working_directory(tmp_path, monkeypatch):
    """The stack names the table relative to the source's root (JOB_TABLE=job_table.json): the
    function finds it there, not in whatever directory the platform starts it in."""
    assert (SOURCE_ROOT / "main.py").is_file()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    (elsewhere / "job_table.json").write_text('{"jobs": {"nightly": {"overlap": "skip"}}}', encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError, match=rf"cannot read '{re.escape(str(SOURCE_ROOT / 'job_table.json'))}'"):
        FunctionConfig.from_env({"JOB_TABLE": "job_table.json"})
    # A relative path from the source's root reaches a table anywhere.
    relative = os.path.relpath(elsewhere / "job_table.json", SOURCE_ROOT)
    assert FunctionConfig.from_env({"JOB_TABLE": relative}).overlap_for("nightly") is OverlapPolicy.SKIP
