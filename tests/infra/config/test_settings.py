"""Config parsing and the timing validation that stops a bad config before any resource."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exactly_once.config import (
    DEFAULT_IDEMPOTENCY_COLLECTION,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_RUNS_COLLECTION,
    FunctionConfig,
    JobPolicy,
)
from exactly_once.delivery.scheduler_request import LOCATION_HEADER, PROJECT_HEADER
from infra.config.schema import CONFIG_KEYS, REPO_ROOT
from infra.plan.headers import headers_for
from infra.settings.environment import function_environment, job_table
from infra.settings.jobs import DEFAULT_RETRY
from infra.settings.loading import load_stack_settings, settings_from_config
from infra.settings.samples import SAMPLE_JOBS
from infra.settings.stack import StackSettings
from infra.settings.timing_checks import timing_advisories, timing_errors
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.timing import rules as timing
from tests.infra.conftest import (
    DEMO_HANDLER,
    NAMESPACE,
    PROJECT,
    REGION,
    build,
    error_of,
    valid_job,
    valid_values,
)
from tests.support.stack_tables import stack_function_env
from tests.support.stacks import demo_job, fixture_stack

# --- defaults and derived values -------------------------------------------------------------


def test_defaults_apply_and_the_time_limit_is_derived_from_the_timeout() -> None:
    settings = build({"jobHandler": DEMO_HANDLER, "jobs": [valid_job()]})
    assert settings.function_timeout_seconds == 60
    assert settings.lease_seconds == DEFAULT_LEASE_SECONDS == 30
    assert settings.time_limit_seconds == 55
    assert settings.retention_seconds == 86400
    # The stack's own database, created by the stack.
    assert (settings.database_name, settings.create_database) == ("eos-prod-ledger", True)
    assert settings.alert_notification_channels == ()
    assert settings.runs_collection == "scheduler_runs"
    assert settings.ingress == "ALLOW_INTERNAL_ONLY"
    assert settings.deletion_protection is True
    assert settings.job_handler == "jobs.demo:run_demo_job"
    assert (settings.project, settings.region) == (PROJECT, REGION)


def test_omitted_job_fields_get_safe_defaults() -> None:
    settings = build(
        {
            "functionTimeoutSeconds": 120,
            "jobHandler": DEMO_HANDLER,
            "jobs": [{"name": "j", "schedule": "0 * * * *"}],
        }
    )
    job = settings.jobs[0]
    assert job.time_zone == "Etc/UTC"
    assert job.attempt_deadline_seconds == 120  # follows the function timeout
    assert job.retry == DEFAULT_RETRY
    assert (job.body, job.handler) == (None, None)
    assert timing_errors(settings) == []


def test_job_timing_carries_stack_and_job_values(two_job_settings: StackSettings) -> None:
    job = two_job_settings.jobs[1]
    assert two_job_settings.job_timing(job) == timing.JobTiming(
        schedule="0 3 * * *",
        attempt_deadline_seconds=60.0,
        function_timeout_seconds=60.0,
        lease_seconds=30,
        retention_seconds=86400.0,
        retry=timing.RetryConfig(5, 0.0, 10.0, 300.0, 3),
        time_limit_seconds=55.0,  # the function's: the job sets none of its own
        time_zone="Europe/Berlin",  # the gaps between its runs are elapsed time in its zone
    )


def test_headers_add_content_type_only_with_a_body(two_job_settings: StackSettings) -> None:
    with_body, without_body = two_job_settings.jobs
    assert headers_for(two_job_settings, with_body) == {
        PROJECT_HEADER: PROJECT,
        LOCATION_HEADER: REGION,
        "Content-Type": "application/json",
    }
    assert headers_for(two_job_settings, without_body) == {PROJECT_HEADER: PROJECT, LOCATION_HEADER: REGION}
    assert json.loads(with_body.body_bytes() or b"") == {"sleep_seconds": 2}
    assert without_body.body_bytes() is None


def test_the_job_table_names_every_job_and_its_handler_only_when_set(two_job_settings: StackSettings) -> None:
    env = function_environment(two_job_settings)
    # Keyed by the job name the function receives (the deployed Cloud Scheduler job id).
    assert FunctionConfig.from_env(stack_function_env(two_job_settings)).job_handlers == {
        "eos-prod_every-5": "jobs.noop:do_nothing"
    }
    assert two_job_settings.scheduler_job_id("every-5") == "eos-prod_every-5"
    assert (env["LEASE_SECONDS"], env["JOB_TIME_LIMIT_SECONDS"]) == ("30", "55")
    assert env["RETENTION_SECONDS"] == "86400"
    plain = build(valid_values())
    # Every job is named (the function refuses one its table does not name), with its zone.
    assert job_table(plain).jobs == {
        plain.scheduler_job_id(job): JobPolicy(time_zone=job.time_zone) for job in plain.jobs
    }


# --- validation errors name the config key and the numbers ------------------------------------


def test_groc_schedule_is_rejected_naming_the_key() -> None:
    message = error_of(valid_values(jobs=[valid_job(schedule="every 5 minutes")]))
    assert f"{NAMESPACE}:jobs[0].schedule" in message
    assert "groc" in message and "'every 5 minutes'" in message


def test_deadline_out_of_range_names_key_and_numbers() -> None:
    message = error_of(valid_values(jobs=[valid_job(), valid_job(name="other", attemptDeadlineSeconds=10)]))
    assert f"{NAMESPACE}:jobs[1].attemptDeadlineSeconds" in message
    assert "10s" in message and "15s..1800s" in message
    assert "jobs[0]" not in message


def test_a_lease_too_short_to_renew_is_rejected_naming_the_key() -> None:
    message = error_of(valid_values(leaseSeconds=6))
    assert f"{NAMESPACE}:leaseSeconds" in message
    assert "lease 6s is shorter than 10s: renewed every 2s" in message


def test_a_time_limit_past_the_timeout_is_rejected_on_hand_built_timing() -> None:
    """The stack derives the time limit; a deployed value (what the policy pack reads) that
    reaches the timeout would end attempts after Cloud Run stopped giving them CPU."""
    settings = build(valid_values())
    job_timing = dataclasses.replace(settings.job_timing(settings.jobs[0]), time_limit_seconds=58)
    (violation,) = [v for v in timing.check_job_timing(job_timing) if not v.advisory]
    assert violation.rule == "time-limit-before-timeout" and "58s" in violation.message


def test_retries_that_cannot_outlive_the_lease_are_rejected() -> None:
    retry = {"retryCount": 2, "minBackoffSeconds": 5, "maxBackoffSeconds": 60, "maxDoublings": 2}
    message = error_of(valid_values(jobs=[valid_job(retry=retry)]))
    assert f"{NAMESPACE}:jobs[0].retry.retryCount" in message
    assert f"{NAMESPACE}:jobs[0].retry.minBackoffSeconds" in message
    assert f"{NAMESPACE}:leaseSeconds" in message
    # 5 and 15 s after the first attempt: both inside the 30 s lease a crash leaves behind.
    assert "lease of 30s" in message and "5s, 15s" in message


def test_retention_shorter_than_the_latest_retry_is_rejected() -> None:
    message = error_of(valid_values(retentionSeconds=300))
    assert f"{NAMESPACE}:retentionSeconds" in message
    (job,) = build(valid_values()).jobs
    latest = timing.latest_retry_arrival_seconds(job.retry, job.attempt_deadline_seconds)
    assert f"retention 300s ends before the latest retry can arrive ({latest:g}s" in message


def test_function_timeout_above_http_limit_is_rejected() -> None:
    message = error_of(
        valid_values(functionTimeoutSeconds=4000, jobs=[valid_job(attemptDeadlineSeconds=1800)])
    )
    assert f"{NAMESPACE}:functionTimeoutSeconds: function timeout 4000s" in message


def test_every_problem_is_reported_at_once() -> None:
    message = error_of(
        valid_values(
            ingress="PUBLIC",
            maxInstances=0,
            databaseName="Bad_Name",
            jobHandler="nocolon",
            jobs=[valid_job(name="bad name!", timeZone="Mars/Olympus", handler="x")],
        )
    )
    for key in (
        "ingress",
        "maxInstances",
        "databaseName",
        "jobHandler",
        "jobs[0].name",
        "jobs[0].timeZone",
        "jobs[0].handler",
    ):
        assert f"{NAMESPACE}:{key}:" in message, key


@pytest.mark.parametrize(
    ("values", "key"),
    [
        (valid_values(functionTimeoutSeconds="60"), "functionTimeoutSeconds"),
        (valid_values(deletionProtection="yes"), "deletionProtection"),
        (valid_values(retentionSeconds=True), "retentionSeconds"),
        (valid_values(jobs=[valid_job(attemptDeadlineSeconds="60s")]), "jobs[0].attemptDeadlineSeconds"),
        (valid_values(jobs=[valid_job(retry={"retryCount": 2.5})]), "jobs[0].retry.retryCount"),
        (valid_values(jobs=[valid_job(retry={"minBackof": 1})]), "jobs[0].retry.minBackof"),
        (valid_values(jobs=[valid_job(attemptDeadline=60)]), "jobs[0].attemptDeadline"),
        (valid_values(jobs=[valid_job(body=[1, 2])]), "jobs[0].body"),
        (valid_values(jobs=[valid_job(), valid_job()]), "jobs[1].name"),
        (valid_values(jobs=[]), "jobs"),
        (valid_values(functionTimeout=60), "functionTimeout"),
    ],
)
def test_bad_types_and_typos_name_the_key(values: dict[str, Any], key: str) -> None:
    assert re.search(rf"{NAMESPACE}:{re.escape(key)}: ", error_of(values))


def test_missing_project_and_region_are_reported() -> None:
    with pytest.raises(SettingsError, match=r"gcp:project is not set[\s\S]*gcp:region is not set"):
        settings_from_config(valid_values(), project="", region="", stack="dev", namespace=NAMESPACE)


def test_advisory_violation_is_not_an_error() -> None:
    settings = build(valid_values(jobs=[valid_job(attemptDeadlineSeconds=30)]))
    advisories = timing_advisories(settings)
    assert len(advisories) == 1
    assert f"{NAMESPACE}:jobs[0].attemptDeadlineSeconds" in advisories[0]
    assert (
        "attempt deadline 30s differs from how long an attempt may take, the job's time limit + 5s = 60s"
        in advisories[0]
    )


# --- the files on disk ------------------------------------------------------------------------


def test_dev_stack_loads_and_passes_every_timing_check() -> None:
    settings = fixture_stack("dev")
    # The stack's own job, then the sample jobs (`samples: true`): the demo job, then one per
    # target kind present that has a sample (tests/infra/targets/test_kind_samples.py).
    samples = [str(job["name"]) for job in SAMPLE_JOBS]
    assert [job.name for job in settings.jobs] == ["nightly-report", *samples]
    assert [(j.schedule, j.time_zone) for j in settings.jobs[:2]] == [
        ("0 3 * * *", "Europe/Berlin"),
        ("*/15 * * * *", "Etc/UTC"),
    ]
    assert demo_job(settings).target is None
    assert settings.deletion_protection is False
    assert settings.lease_seconds == 30
    for job in settings.jobs:
        assert job.retry == timing.RetryConfig(5, 0.0, 15.0, 300.0, 3)
        assert timing.check_job_timing(settings.job_timing(job)) == []
        # The crash-recovery numbers the dev config comments on.
        assert timing.retry_arrivals_if_every_attempt_fails_instantly(job.retry) == [15, 45, 105, 225, 465]


def test_load_stack_settings_applies_project_defaults_then_stack_values(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "function").symlink_to(REPO_ROOT / "function")  # the handlers are checked there
    stack = {
        "config": {
            "gcp:project": "p1",
            "gcp:region": "asia-northeast1",
            f"{NAMESPACE}:runsCollection": "runs",
            f"{NAMESPACE}:jobHandler": DEMO_HANDLER,
            f"{NAMESPACE}:jobs": [valid_job()],
        }
    }
    (tmp_path / "Pulumi.staging.yaml").write_text(yaml.safe_dump(stack))
    settings = load_stack_settings("staging", root=tmp_path)
    assert (settings.project, settings.region, settings.runs_collection) == ("p1", "asia-northeast1", "runs")
    assert settings.database_name == "eos-staging-ledger"  # Pulumi.yaml: the stack's own
    assert settings.deletion_protection is True  # non-dev stacks default to protected


def test_load_stack_settings_reports_the_stack_file_errors(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "function").symlink_to(REPO_ROOT / "function")
    bad = {
        "config": {
            "gcp:project": "p",
            "gcp:region": "r",
            f"{NAMESPACE}:jobHandler": DEMO_HANDLER,
            f"{NAMESPACE}:jobs": [valid_job(schedule="@hourly")],
        }
    }
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(SettingsError, match=rf"stack 'bad'[\s\S]*{NAMESPACE}:jobs\[0\]\.schedule"):
        load_stack_settings("bad", root=tmp_path)
    with pytest.raises(SettingsError, match=r"Pulumi\.missing\.yaml does not exist"):
        load_stack_settings("missing", root=tmp_path)


def test_pulumi_yaml_declares_every_scalar_key_with_type_default_description() -> None:
    project = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == NAMESPACE
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": "venv"}}
    declared = project["config"]
    # A key whose default depends on other keys is not declared (it would become required).
    assert set(declared) == {key.name for key in CONFIG_KEYS if key.default is not None}
    for key in CONFIG_KEYS:
        if key.default is None:
            continue
        schema = declared[key.name]
        if key.type == "array":
            assert schema.pop("items") == {"type": "string"}, key.name
        if key.type == "object":
            # Pulumi has no type for a map: declared untyped, with a map for its default.
            assert "type" not in schema and isinstance(schema["default"], dict), key.name
            schema["type"] = "object"
        assert set(schema) == {"type", "default", "description"}, key.name
        default = list(key.default) if isinstance(key.default, tuple) else key.default
        assert (schema["type"], schema["default"]) == (key.type, default), key.name
        assert schema["description"] == key.description, key.name
    assert set(project["template"]["config"]) == {"gcp:project", "gcp:region"}
    assert all(v["description"] for v in project["template"]["config"].values())


def test_pulumi_yaml_defaults_the_collections_to_the_functions_own_defaults():
    """Pulumi.yaml cannot import a Python constant, so this test keeps the two in step: a stack
    left at its defaults and a function deployed without those variables use one collection."""
    config = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())["config"]
    defaults = {key.split(":")[-1]: value.get("default") for key, value in config.items()}
    assert defaults["runsCollection"] == DEFAULT_RUNS_COLLECTION
    assert defaults["idempotencyCollection"] == DEFAULT_IDEMPOTENCY_COLLECTION


def test_the_audit_jobs_name_is_reserved() -> None:
    message = error_of(valid_values(jobs=[valid_job(), valid_job(name="missed-run-audit")]))
    assert f"{NAMESPACE}:jobs[1].name: 'missed-run-audit' is the name of the stack's own" in message


def test_the_missed_run_audit_is_on_unless_switched_off() -> None:
    assert build(valid_values()).missed_run_audit is True
    assert build(valid_values(missedRunAudit=False)).missed_run_audit is False
