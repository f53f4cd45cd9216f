from __future__ import annotations

import functools

import pytest

from exactly_once import RunContext, exactly_once
from exactly_once.config import ConfigError, FunctionConfig, OverlapPolicy
from exactly_once.router import JobRouter
from localrun.function_server import FunctionServer, FunctionServerError
from tests.function import sample_jobs


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
            "JOB_HANDLERS": '{"nightly": "jobs.demo:run_demo_job"}',
        }
    )
    assert (config.project, config.database, config.runs_collection) == ("acme", "dedup", "runs")
    assert (config.lease_seconds, config.retention_seconds) == (70, 3600)
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
        ({"JOB_HANDLERS": "{not json"}, "JOB_HANDLERS"),
        ({"JOB_HANDLERS": '["jobs.demo:run_demo_job"]'}, "JOB_HANDLERS"),
        ({"JOB_OVERLAP": "{not json"}, "JOB_OVERLAP"),
        ({"JOB_OVERLAP": '["a"]'}, "JOB_OVERLAP"),
        ({"JOB_OVERLAP": '{"a": "forbid"}'}, "JOB_OVERLAP"),
        ({"JOB_OVERLAP": '{"a": 1}'}, "JOB_OVERLAP"),
    ],
)
def test_bad_values_name_the_variable(env, variable):
    with pytest.raises(ConfigError) as caught:
        FunctionConfig.from_env(env)
    assert caught.value.variable == variable
    assert variable in str(caught.value)


def test_overlap_policies_are_read_per_job():
    config = FunctionConfig.from_env({"JOB_OVERLAP": '{"a": "skip", "b": "wait"}'})
    assert config.overlap_for("a") is OverlapPolicy.SKIP
    assert config.overlap_for("b") is OverlapPolicy.WAIT
    assert config.overlap_for("c") is OverlapPolicy.ALLOW
    with pytest.raises(
        ConfigError, match=r"JOB_OVERLAP: 'a': 'forbid' is not one of \['allow', 'skip', 'wait'\]"
    ):
        FunctionConfig.from_env({"JOB_OVERLAP": '{"a": "forbid"}'})


def test_per_job_time_limits_are_read_and_bounded_by_the_function_limit():
    config = FunctionConfig.from_env({"JOB_TIME_LIMIT_SECONDS": "1195", "JOB_TIME_LIMITS": '{"a": 55}'})
    assert (config.time_limit_for("a"), config.time_limit_for("b")) == (55.0, 1195.0)
    for raw, problem in (
        (
            '{"a": 1200}',
            r"'a': 1200 must be a number of seconds above 0 and at most JOB_TIME_LIMIT_SECONDS=1195",
        ),
        ('{"a": 0}', r"'a': 0 must be"),
        ('{"a": "55"}', r"'a': '55' must be"),
        ('{"a": true}', r"'a': True must be"),
        ("[55]", r"must be a JSON object"),
        ("{", r"not JSON"),
    ):
        with pytest.raises(ConfigError, match=rf"environment variable JOB_TIME_LIMITS: {problem}"):
            FunctionConfig.from_env({"JOB_TIME_LIMIT_SECONDS": "1195", "JOB_TIME_LIMITS": raw})


def test_router_takes_callables_as_well_as_names():
    def nightly(run):
        return "nightly"

    router = JobRouter("jobs.noop:do_nothing", {"nightly": nightly})
    assert router.handler_for("nightly") is nightly


def test_unimportable_handler_names_the_variable():
    with pytest.raises(ConfigError, match=r"JOB_HANDLER: cannot import module 'jobs\.nope'"):
        JobRouter("jobs.nope:run", {})
    with pytest.raises(ConfigError, match=r"JOB_HANDLERS\['nightly'\]: 'jobs\.demo' has no callable 'nope'"):
        JobRouter("jobs.noop:do_nothing", {"nightly": "jobs.demo:nope"})


def test_a_function_served_with_exactly_once_is_refused_by_name_and_as_a_callable():
    expected = (
        r"JOB_HANDLERS\['nightly'\]: served_on_its_own is decorated with @exactly_once, which serves it "
        r"as an HTTP function of its own; the router already runs every handler exactly once"
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


def test_server_refuses_to_start_and_names_the_variable(tmp_path):
    """Start-up validation is real: the Functions Framework process exits with the message."""
    log = tmp_path / "server.log"
    server = FunctionServer({"LEASE_SECONDS": "ten"}, log)
    with pytest.raises(FunctionServerError):
        server.start()
    assert "environment variable LEASE_SECONDS: 'ten' is not a number of seconds" in log.read_text()
