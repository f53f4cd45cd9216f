"""What one Cloud Scheduler job must say (scheduler_jobs.py): OIDC auth with an audience, a
unix-cron schedule and a deadline in range, no direct Google API call, a body the function
accepts. A crafted violation is reported with a useful message, a close variant that is fine is
not, and preview-time unknowns are skipped without a crash."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from exactly_once.delivery.handler import MAX_BODY_BYTES

from ..scheduler_guardrails.offline import UNKNOWN_STRING, resource_policy, run_resource_policy
from ..scheduler_guardrails.policies import BUCKET, SCHEDULER_JOB
from . import fixtures
from .crafted import check

# --- scheduler-job-oidc-auth ----------------------------------------------------------------


def test_job_with_oidc_token_and_audience_passes() -> None:
    assert check("scheduler-job-oidc-auth", SCHEDULER_JOB, fixtures.job()) == []


def test_job_without_any_token_is_unauthenticated() -> None:
    job = fixtures.job()
    del job["httpTarget"]["oidcToken"]
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "without authentication" in message
    assert "httpTarget.oidcToken" in message and "audience" in message


def test_job_with_oauth_token_is_told_to_use_oidc() -> None:
    job = fixtures.job()
    del job["httpTarget"]["oidcToken"]
    job["httpTarget"]["oauthToken"] = {"serviceAccountEmail": fixtures.INVOKER_SA}
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "oauthToken" in message and "Replace it with httpTarget.oidcToken" in message


@pytest.mark.parametrize("audience", [None, "", "  "])
def test_job_without_audience_is_reported(audience: str | None) -> None:
    job = fixtures.job()
    if audience is None:
        del job["httpTarget"]["oidcToken"]["audience"]
    else:
        job["httpTarget"]["oidcToken"]["audience"] = audience
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "httpTarget.oidcToken.audience is not set" in message


def test_job_without_token_account_is_reported() -> None:
    job = fixtures.job()
    job["httpTarget"]["oidcToken"]["serviceAccountEmail"] = ""
    [message] = check("scheduler-job-oidc-auth", SCHEDULER_JOB, job)
    assert "serviceAccountEmail is empty" in message


def test_job_with_unknown_audience_and_account_is_not_reported() -> None:
    # A new function's URI and a new account's email are unknown during preview.
    job = fixtures.job()
    job["httpTarget"]["oidcToken"] = {"serviceAccountEmail": UNKNOWN_STRING, "audience": UNKNOWN_STRING}
    job["httpTarget"]["uri"] = UNKNOWN_STRING
    assert check("scheduler-job-oidc-auth", SCHEDULER_JOB, job) == []
    job["httpTarget"] = UNKNOWN_STRING
    assert check("scheduler-job-oidc-auth", SCHEDULER_JOB, job) == []


def test_job_policies_ignore_other_resource_types() -> None:
    assert check("scheduler-job-oidc-auth", BUCKET, {"httpTarget": {"uri": "x"}}) == []


# --- scheduler-job-schedule-and-deadline ----------------------------------------------------


def test_unix_cron_schedule_and_deadline_in_range_pass() -> None:
    assert check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, fixtures.job()) == []


def test_groc_schedule_is_rejected_with_the_timing_module_reason() -> None:
    job = fixtures.job()
    job["schedule"] = "every 5 minutes"
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert "property schedule" in message
    assert (
        "groc syntax" in message
    )  # the reason comes from policy.scheduler_guardrails.rules.timing.cron.unix_cron_error
    assert "'*/5 * * * *'" in message


def test_a_schedule_that_never_fires_is_rejected_with_the_timing_module_reason() -> None:
    job = fixtures.job()
    job["schedule"] = "59 23 31 2 *"
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert (
        "property schedule: schedule '59 23 31 2 *' never fires: day 31 never occurs in month 2, which has "
        "at most 29 days"
    ) in message
    job["schedule"] = "59 23 29 2 *"  # every leap year
    assert check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job) == []


def test_missing_schedule_is_reported() -> None:
    job = fixtures.job()
    del job["schedule"]
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert "schedule is missing" in message


@pytest.mark.parametrize("deadline", ["14s", "1801s", "3600s"])
def test_deadline_outside_range_is_reported(deadline: str) -> None:
    job = fixtures.job()
    job["attemptDeadline"] = deadline
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert f"attemptDeadline '{deadline}' is outside" in message and "15s..1800s" in message


@pytest.mark.parametrize("deadline", ["15s", "1800s", "3.5s0", "sixty"])
def test_deadline_edges_pass_and_garbage_is_reported(deadline: str) -> None:
    job = fixtures.job()
    job["attemptDeadline"] = deadline
    messages = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    if deadline in ("15s", "1800s"):
        assert messages == []
    else:
        [message] = messages
        assert "is not a duration" in message


def test_fractional_deadline_is_parsed() -> None:
    job = fixtures.job()
    job["attemptDeadline"] = "3.5s"
    [message] = check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job)
    assert "'3.5s' is outside" in message


def test_unknown_schedule_and_deadline_are_not_reported() -> None:
    job = fixtures.job()
    job["schedule"] = UNKNOWN_STRING
    job["attemptDeadline"] = UNKNOWN_STRING
    assert check("scheduler-job-schedule-and-deadline", SCHEDULER_JOB, job) == []


# --- scheduler-job-no-direct-google-api -----------------------------------------------------


def test_no_direct_google_api_level_is_mandatory() -> None:
    assert (
        resource_policy("scheduler-job-no-direct-google-api").enforcement_level == EnforcementLevel.MANDATORY
    )


def direct(uri: Any) -> list[str]:
    job = fixtures.job()
    job["httpTarget"]["uri"] = uri
    return run_resource_policy(resource_policy("scheduler-job-no-direct-google-api"), SCHEDULER_JOB, job, "j")


@pytest.mark.parametrize(
    "uri",
    [
        "https://workflowexecutions.googleapis.com/v1/projects/p/locations/l/workflows/w/executions",
        "https://WorkflowExecutions.GoogleAPIs.com./v1/x",
        "https://run.googleapis.com/v2/projects/p/locations/l/jobs/j:run",
    ],
)
def test_job_calling_a_google_api_directly_is_rejected(uri: str) -> None:
    [message] = direct(uri)
    assert "Scheduler job 'j'" in message and "calls a Google API directly" in message
    assert "Route it through the dedup proxy" in message and "docs/proxy.md" in message


@pytest.mark.parametrize(
    "uri",
    [fixtures.FUNCTION_URL, "https://googleapis.com.example.org/x", "https://notgoogleapis.com/x", "::bad"],
)
def test_function_uri_and_lookalike_hosts_pass(uri: str) -> None:
    assert direct(uri) == []


def test_unknown_or_missing_uri_is_not_reported() -> None:
    assert direct(UNKNOWN_STRING) == []
    no_target = fixtures.job()
    del no_target["httpTarget"]
    policy = resource_policy("scheduler-job-no-direct-google-api")
    assert run_resource_policy(policy, SCHEDULER_JOB, no_target) == []


# --- scheduler-job-body-accepted ------------------------------------------------------------


def _with_body(body: bytes | str) -> dict[str, Any]:
    job = fixtures.job()
    job["httpTarget"]["body"] = body if isinstance(body, str) else base64.b64encode(body).decode()
    return job


def test_a_body_the_function_accepts_passes() -> None:
    assert check("scheduler-job-body-accepted", SCHEDULER_JOB, _with_body(b'{"sleep_seconds":1}')) == []
    assert check("scheduler-job-body-accepted", SCHEDULER_JOB, fixtures.job()) == []  # no body


def test_a_body_over_the_functions_limit_is_refused_with_its_size_and_the_limit() -> None:
    body = b'{"blob":"' + b"x" * (MAX_BODY_BYTES) + b'"}'
    [message] = check("scheduler-job-body-accepted", SCHEDULER_JOB, _with_body(body))
    assert message.startswith(
        f"Scheduler job 'crafted': httpTarget.body: the body Cloud Scheduler sends is {len(body):,} bytes, "
        f"more than the {MAX_BODY_BYTES:,} bytes the function accepts"
    )


def test_a_body_holding_nan_is_refused_naming_where() -> None:
    [message] = check("scheduler-job-body-accepted", SCHEDULER_JOB, _with_body(b'{"a":{"b":NaN}}'))
    assert "httpTarget.body: body.a.b is .nan (NaN): JSON has no such number" in message


def test_a_body_that_is_not_base64_is_refused() -> None:
    [message] = check("scheduler-job-body-accepted", SCHEDULER_JOB, _with_body("not base64!"))
    assert "httpTarget.body is not base64" in message


def test_an_unknown_body_is_skipped() -> None:
    assert check("scheduler-job-body-accepted", SCHEDULER_JOB, _with_body(UNKNOWN_STRING)) == []
