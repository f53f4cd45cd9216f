"""A job's cloudRunJob / bigquery target and its env / secrets / grants: refused before any
resource, each error naming the config key to edit."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from exactly_once.config import TIME_LIMIT_MARGIN_SECONDS
from exactly_once.targets.call_timeout import CALL_MARGIN_SECONDS, CALL_TIMEOUT_SECONDS
from infra.plan.needs import runtime_grants
from infra.settings.environment import function_environment
from infra.settings.timing_checks import timing_advisories, timing_errors
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from tests.infra.conftest import NAMESPACE, PROJECT, REGION, build, valid_job, valid_values


def error_of(*jobs: dict[str, Any], **values: Any) -> str:
    with pytest.raises(SettingsError) as raised:
        build(valid_values(jobs=list(jobs), **values))
    return str(raised.value)


def key(path: str) -> str:
    return f"{NAMESPACE}:jobs[0].{path}"


def test_a_short_cloud_run_job_name_is_the_stack_project_and_region() -> None:
    settings = build(valid_values(jobs=[valid_job(cloudRunJob={"job": "export"})]))
    table = json.loads(function_environment(settings)["CLOUD_RUN_JOBS"])
    assert table == {"eos-prod_every-5": {"job": f"projects/{PROJECT}/locations/{REGION}/jobs/export"}}


@pytest.mark.parametrize(
    ("target", "path", "words"),
    [
        ({"job": "Export_Job"}, "cloudRunJob.job", "not a Cloud Run job name"),
        ({"job": "x", "taskCount": 0}, "cloudRunJob.taskCount", "1..10000"),
        ({"job": "x", "timeoutSeconds": 90000}, "cloudRunJob.timeoutSeconds", "1..86400"),
        ({"job": "x", "env": {"RUN_ID": "mine"}}, "cloudRunJob.env.RUN_ID", "set by the proxy"),
        (
            {"job": "x", "env": {"CLOUD_RUN_TASK_INDEX": "1"}},
            "cloudRunJob.env.CLOUD_RUN_TASK_INDEX",
            "reserved",
        ),
        ({"job": "x", "args": "--day"}, "cloudRunJob.args", "list of strings"),
        ({"job": "x", "jobs": 1}, "cloudRunJob.jobs", "unknown key"),
        ({"job": "x", "timeout": 600}, "cloudRunJob.timeout", "unknown key; did you mean timeoutSeconds?"),
        ({"job": "x", "zone": "b"}, "cloudRunJob.zone", "expected one of sample, job, args, env, taskCount"),
        ({"sample": True, "job": "x"}, "cloudRunJob", "not both"),
        ({}, "cloudRunJob", "set sample: true"),
    ],
)
def test_cloud_run_job_errors_name_the_key(target: dict[str, Any], path: str, words: str) -> None:
    message = error_of(valid_job(cloudRunJob=target))
    assert f"{key(path)}:" in message and words in message, message


@pytest.mark.parametrize(
    ("target", "path", "words"),
    [
        ({"query": "SELECT 1"}, "bigquery.location", "required"),
        ({"query": "", "location": "EU"}, "bigquery.query", "non-empty"),
        (
            {"query": "SELECT 1", "location": "EU", "destinationTable": "t"},
            "bigquery.destinationTable",
            "<project>",
        ),
        (
            {"query": "SELECT 1", "location": "EU", "writeDisposition": "WRITE_APPEND"},
            "bigquery.writeDisposition",
            "destinationTable",
        ),
        (
            {"query": "SELECT 1", "location": "EU", "labels": {"Team": "x"}},
            "bigquery.labels.Team",
            "label key",
        ),
        (
            {"query": "SELECT 1", "location": "EU", "readDatasets": ["sales"]},
            "bigquery.readDatasets",
            "<project>.<dataset>",
        ),
        ({"sample": True, "location": "EU"}, "bigquery.location", "leave it out"),
    ],
)
def test_bigquery_errors_name_the_key(target: dict[str, Any], path: str, words: str) -> None:
    message = error_of(valid_job(bigquery=target))
    assert f"{key(path)}:" in message and words in message, message


def test_an_unknown_target_key_is_one_error() -> None:
    message = error_of(valid_job(cloudRunJob={"job": "x", "timeout": 600}))
    assert message.count("cloudRunJob.timeout") == 1, message
    message = error_of(valid_job(bigquery={"query": "SELECT 1", "location": "EU", "labls": {}}))
    assert message.count("bigquery.labls") == 1 and "did you mean labels?" in message, message


@pytest.mark.parametrize(
    ("target", "api"),
    [
        ({"cloudRunJob": {"job": "x"}}, "Cloud Run Admin API"),
        ({"bigquery": {"query": "SELECT 1", "location": "EU"}}, "BigQuery"),
    ],
)
def test_an_attempt_shorter_than_a_call_is_an_advisory_naming_the_limit(
    target: dict[str, Any], api: str
) -> None:
    """Each call's timeout is cut to what the attempt has left: an attempt shorter than a whole
    call (and the margin it keeps) may cut a slow call short. Named by the key that sets it."""
    margin = CALL_MARGIN_SECONDS + TIME_LIMIT_MARGIN_SECONDS
    short = build(
        valid_values(functionTimeoutSeconds=20, jobs=[valid_job(attemptDeadlineSeconds=20, **target)])
    )
    assert timing_errors(short) == []
    (advisory,) = timing_advisories(short)
    assert advisory.startswith(
        f"{NAMESPACE}:functionTimeoutSeconds: job 'every-5': 20s is shorter than the {api}"
    )
    assert f"set at least {CALL_TIMEOUT_SECONDS + margin:g}" in advisory
    own = build(valid_values(jobs=[valid_job(timeLimitSeconds=20, attemptDeadlineSeconds=25, **target)]))
    (advisory,) = timing_advisories(own)
    assert advisory.startswith(f"{key('timeLimitSeconds')}: job 'every-5': 20s is shorter than the {api}")
    assert f"set at least {CALL_TIMEOUT_SECONDS + CALL_MARGIN_SECONDS:g}" in advisory
    enough = math.ceil(CALL_TIMEOUT_SECONDS + margin)
    fits = build(
        valid_values(functionTimeoutSeconds=enough, jobs=[valid_job(attemptDeadlineSeconds=enough, **target)])
    )
    assert timing_advisories(fits) == []


def test_a_job_has_one_target_no_body_and_the_target_s_handler() -> None:
    both = error_of(valid_job(cloudRunJob={"job": "x"}, bigquery={"sample": True}))
    assert "jobs[0].cloudRunJob, jobs[0].bigquery" in both
    assert f"{key('body')}:" in error_of(valid_job(cloudRunJob={"job": "x"}, body={"a": 1}))
    assert f"{key('handler')}:" in error_of(
        valid_job(bigquery={"sample": True}, handler="jobs.noop:do_nothing")
    )
    # The proxy without its setting would fail every run: refused, naming where the handler came from.
    assert f"{key('handler')}:" in error_of(valid_job(handler="jobs.cloud_run_job:run_cloud_run_job"))
    message = error_of(valid_job(), jobHandler="jobs.bigquery_job:run_bigquery_job")
    assert f"{NAMESPACE}:jobHandler:" in message and "jobs[0].bigquery" in message


@pytest.mark.parametrize(
    ("access", "path", "words"),
    [
        ({"env": {"DB_PASSWORD": "hunter2"}}, "env.DB_PASSWORD", "Secret Manager"),
        ({"env": {"GITHUB_TOKEN": "x"}}, "env.GITHUB_TOKEN", "secrets.GITHUB_TOKEN"),
        ({"env": {"LIMIT": 10}}, "env.LIMIT", "quote numbers"),
        ({"env": {"LEASE_SECONDS": "5"}}, "env.LEASE_SECONDS", "the function itself reads"),
        # Unset in one region, yet a job's own value would break a second region added later.
        ({"env": {"SERVING_REGION": "x"}}, "env.SERVING_REGION", "the function itself reads"),
        ({"env": {"PORT": "1"}}, "env.PORT", "reserved"),
        ({"secrets": {"API_KEY": "plain-value with spaces"}}, "secrets.API_KEY", "not a secret reference"),
        ({"secrets": {"API_KEY": "key/versions/3"}}, "secrets.API_KEY", "not a secret reference"),
        ({"grants": [{"role": "roles/bigquery.dataViewer"}]}, "grants[0]", "never the project"),
        (
            {"grants": [{"role": "roles/bigquery.dataOwner", "dataset": "acme-data.sales"}]},
            "grants[0].role",
            "dataViewer",
        ),
        (
            {"grants": [{"role": "roles/run.admin", "cloudRunJob": "projects/p/locations/l/jobs/j"}]},
            "grants[0].role",
            "jobsExecutorWithOverrides",
        ),
        (
            {"grants": [{"role": "roles/pubsub.publisher", "topic": "events"}]},
            "grants[0].topic",
            "projects/<project>/topics/<topic>",
        ),
        (
            {"grants": [{"role": "roles/storage.objectViewer", "bucket": "b1", "dataset": "a.b"}]},
            "grants[0]",
            "exactly one",
        ),
        ({"grants": {"role": "x"}}, "grants", "expected a list"),
    ],
)
def test_access_errors_name_the_key(access: dict[str, Any], path: str, words: str) -> None:
    message = error_of(valid_job(**access))
    assert f"{key(path)}:" in message and words in message, message


def test_two_jobs_may_not_set_one_variable_two_ways() -> None:
    first = valid_job(env={"REGION_NAME": "eu"})
    second = valid_job(name="other", env={"REGION_NAME": "us"})
    message = error_of(first, second)
    assert f"{NAMESPACE}:jobs[1].env.REGION_NAME:" in message and "jobs[0].env.REGION_NAME" in message
    # The same value twice is one setting, not a conflict.
    build(valid_values(jobs=[first, valid_job(name="other", env={"REGION_NAME": "eu"})]))


def test_an_environment_over_cloud_run_s_limit_is_refused_naming_the_largest_variable() -> None:
    query = "SELECT " + " + ".join(["1"] * 12_000)
    message = error_of(valid_job(bigquery={"query": query, "location": "EU"}))
    assert f"{NAMESPACE}:jobs:" in message and "BIGQUERY_JOBS" in message and "32768" in message


def test_every_grant_is_one_resource_deduplicated_across_jobs() -> None:
    grant = {"role": "roles/storage.objectViewer", "bucket": "acme-exports"}
    settings = build(
        valid_values(
            jobs=[
                valid_job(grants=[grant], secrets={"API_KEY": "projects/vault/secrets/api/versions/2"}),
                valid_job(name="other", grants=[grant], cloudRunJob={"job": "export"}),
            ]
        )
    )
    assert [(g.kind, g.resource, g.role) for g in runtime_grants(settings)] == [
        ("bucket", "acme-exports", "roles/storage.objectViewer"),
        (
            "cloudRunJob",
            f"projects/{PROJECT}/locations/{REGION}/jobs/export",
            "roles/run.jobsExecutorWithOverrides",
        ),
        ("cloudRunJob", f"projects/{PROJECT}/locations/{REGION}/jobs/export", "roles/run.viewer"),
        ("secret", "projects/vault/secrets/api", "roles/secretmanager.secretAccessor"),
    ]
