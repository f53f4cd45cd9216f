"""`jobs[].runKey`: what a job's runs are keyed by, checked by key, unique in the stack, carried
to the function in its job table only for a job keyed by something other than its name, and
followed by the audit's configuration and the `ops` CLI."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from exactly_once.config import FunctionConfig, JobPolicy, run_keys_of
from infra.plan.audit_job import audited_jobs, with_audit_job
from infra.settings.environment import job_table
from ops.context import StackContext
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tests.support.stack_tables import stack_function_env


def test_a_job_without_a_run_key_is_keyed_by_its_deployed_id_and_adds_nothing_to_the_table() -> None:
    plain = build(valid_values(jobs=[valid_job(name="report")]))
    (report,) = plain.jobs
    assert report.run_key is None and report.key_name == "report"
    assert plain.run_key_id(report) == plain.scheduler_job_id(report) == "eos-prod_report"
    assert plain.job_run_keys() == {}
    assert job_table(plain).jobs == {"eos-prod_report": JobPolicy(time_zone=report.time_zone)}
    # A runKey equal to the name is no key of its own either: the table stays as it was.
    same = build(valid_values(jobs=[valid_job(name="report", runKey="report")]))
    assert same.job_run_keys() == {} and job_table(same) == job_table(plain)


def test_a_renamed_job_keeps_its_run_key_in_the_job_table() -> None:
    settings = build(
        valid_values(jobs=[valid_job(name="report-b", runKey="report"), valid_job(name="other")])
    )
    renamed, other = settings.jobs
    assert settings.run_key_id(renamed) == "eos-prod_report"
    assert job_table(settings).jobs == {
        "eos-prod_report-b": JobPolicy(run_key="eos-prod_report", time_zone=renamed.time_zone),
        "eos-prod_other": JobPolicy(time_zone=other.time_zone),
    }
    config = FunctionConfig.from_env(stack_function_env(settings))
    assert run_keys_of(config.jobs) == {"eos-prod_report-b": "eos-prod_report"}


def test_the_audit_and_ops_follow_the_run_key() -> None:
    """The audit names the job by its key (run ids, pause history, findings); its horizon and
    pause change are looked up by the key's name, so a rename keeps them."""
    settings = with_audit_job(build(valid_values(jobs=[valid_job(name="report-b", runKey="report")])))
    deployed = datetime(2026, 10, 1, tzinfo=UTC)
    audited = audited_jobs(settings, {"report": deployed}, {"report": deployed})
    assert [job.name for job in audited] == ["eos-prod_report", "eos-prod_missed-run-audit"]
    assert (audited[0].not_before, audited[0].pause_changed_at) == (deployed, deployed)
    # Catch-up delivers as the Scheduler job that exists now.
    assert audited[0].delivery is None  # no catchup policy: nothing to deliver
    context = StackContext("prod", settings, settings.project, settings.database_name)
    assert context.audited(context.job("report-b")).name == "eos-prod_report"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("has space", "'has space' must be 1-100 of A-Z, a-z, 0-9, '-', '_', as a job name"),
        ("", "'' must be 1-100"),
        (7, "7 must be 1-100"),
        (None, "None must be 1-100"),
        ("x" * 101, "must be 1-100"),
    ],
)
def test_a_run_key_follows_the_job_name_rules(value: object, problem: str) -> None:
    message = error_of(valid_values(jobs=[valid_job(runKey=value)]))
    assert f"{NAMESPACE}:jobs[0].runKey: " in message and problem in message


@pytest.mark.parametrize(
    ("jobs", "key", "names"),
    [
        # Two explicit keys alike.
        (
            [valid_job(name="a", runKey="k"), valid_job(name="b", runKey="k")],
            "jobs[1].runKey",
            ("job 'b' is keyed by 'k'", "also the runKey of job 'a'"),
        ),
        # A runKey that is another job's name, that job keyed by its name: either order, the key
        # named is the runKey that was set.
        (
            [valid_job(name="a"), valid_job(name="b", runKey="a")],
            "jobs[1].runKey",
            ("job 'b' is keyed by 'a'", "the name of job 'a', which has no runKey"),
        ),
        (
            [valid_job(name="b", runKey="a"), valid_job(name="a")],
            "jobs[0].runKey",
            ("job 'b' is keyed by 'a'", "the name of job 'a', which has no runKey"),
        ),
    ],
)
def test_two_jobs_keyed_alike_are_refused_naming_both(
    jobs: list[dict[str, object]], key: str, names: tuple[str, ...]
) -> None:
    message = error_of(valid_values(jobs=jobs))
    assert f"{NAMESPACE}:{key}: " in message
    assert all(name in message for name in names), message


def test_a_job_may_take_a_run_key_that_another_job_renamed_away_from() -> None:
    """`a` renamed `b` keeps key `a`, and a new job may then not be called `a`; but a job keyed
    `a` by its runKey beside none called `a` is fine."""
    build(valid_values(jobs=[valid_job(name="b", runKey="a"), valid_job(name="c")]))
    message = error_of(valid_values(jobs=[valid_job(name="b", runKey="a"), valid_job(name="a")]))
    assert "two jobs keyed alike would share their run ids" in message


def test_the_audit_jobs_name_is_no_run_key() -> None:
    message = error_of(valid_values(jobs=[valid_job(runKey="missed-run-audit")]))
    assert f"{NAMESPACE}:jobs[0].runKey: 'missed-run-audit' is the name of the stack's own" in message
