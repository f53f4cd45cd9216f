"""The messages a new user meets first: each says what to write instead, in the config's terms."""

from __future__ import annotations

import pytest

from policy.scheduler_guardrails.rules.config.problems import ConfigProblems, unknown_keys
from tests.infra.conftest import NAMESPACE, error_of, valid_job, valid_values


def _lines(message: str) -> list[str]:
    return [line.removeprefix("  - ") for line in message.splitlines()[1:]]


def test_a_job_without_a_name_is_told_the_name_is_missing() -> None:
    job = valid_job()
    del job["name"]
    assert _lines(error_of(valid_values(jobs=[job]))) == [
        f"{NAMESPACE}:jobs[0].name: name is missing: every job needs one, 1-100 of A-Z, a-z, 0-9, '-', '_'"
    ]


def test_a_name_that_breaks_the_pattern_is_quoted() -> None:
    (line,) = _lines(error_of(valid_values(jobs=[valid_job(name="bad name!")])))
    assert line == f"{NAMESPACE}:jobs[0].name: 'bad name!' must be 1-100 of A-Z, a-z, 0-9, '-', '_'"


def test_a_job_key_in_the_wrong_case_names_the_right_one() -> None:
    job = valid_job()
    job["timezone"] = job.pop("timeZone")
    assert _lines(error_of(valid_values(jobs=[job]))) == [
        f"{NAMESPACE}:jobs[0].timezone: unknown key of job 'every-5'; did you mean timeZone?"
    ]


def test_the_key_of_a_target_kind_the_checkout_lacks_names_the_job_and_the_key() -> None:
    # What a job using a deleted kind's key (`workflow:` once
    # policy/scheduler_guardrails/rules/targets/workflow.py is gone)
    # meets: the kind's key is one the parser does not know, like any never written.
    job = valid_job(name="nightly-export", dataflow={"template": "gs://bucket/export"})
    (line,) = _lines(error_of(valid_values(jobs=[valid_job(), job])))
    assert line.startswith(
        f"{NAMESPACE}:jobs[1].dataflow: unknown key of job 'nightly-export'; expected one of name,"
    )


@pytest.mark.parametrize(
    ("values", "line"),
    [
        (
            valid_values(jobs=[valid_job(retry={"minBackof": 1})]),
            "jobs[0].retry.minBackof: unknown retry key; did you mean minBackoffSeconds?",
        ),
        (
            valid_values(functionTimeout=60),
            "functionTimeout: unknown config key; did you mean functionTimeoutSeconds?",
        ),
    ],
)
def test_retry_and_stack_keys_get_the_same_hint(values: dict[str, object], line: str) -> None:
    assert _lines(error_of(values)) == [f"{NAMESPACE}:{line}"]


def test_a_key_like_no_known_one_lists_them_all() -> None:
    errors = ConfigProblems("ns")
    unknown_keys({"zzz": 1, "a": 2}, "thing", ("a", "b"), errors, what="thing key")
    assert errors == ["ns:thing.zzz: unknown thing key; expected one of a, b"]


def test_a_macro_schedule_gets_its_unix_cron_spelling() -> None:
    (line,) = _lines(error_of(valid_values(jobs=[valid_job(schedule="@hourly")])))
    assert line == (
        f"{NAMESPACE}:jobs[0].schedule: job 'every-5': schedule '@hourly': macros are not unix-cron: "
        "use `0 * * * *`"
    )


def test_a_step_past_the_fields_range_is_refused_naming_the_schedule() -> None:
    (line,) = _lines(error_of(valid_values(jobs=[valid_job(schedule="*/70 * * * *")])))
    assert line.startswith(
        f"{NAMESPACE}:jobs[0].schedule: job 'every-5': schedule '*/70 * * * *': minute step 70 is "
        "larger than the field's range 0-59"
    )


def test_a_stack_wide_error_is_reported_once_not_once_per_job() -> None:
    jobs = [valid_job(name=name, attemptDeadlineSeconds=1800) for name in ("a", "b", "c")]
    assert _lines(error_of(valid_values(functionTimeoutSeconds=4000, jobs=jobs))) == [
        f"{NAMESPACE}:functionTimeoutSeconds: function timeout 4000s must be within 1s..3600s for HTTP "
        "functions"
    ]
    short_lease = _lines(error_of(valid_values(leaseSeconds=6, jobs=jobs[:2])))
    assert short_lease == [
        f"{NAMESPACE}:leaseSeconds: lease 6s is shorter than 10s: renewed every 2s, a few slow Firestore "
        "calls would end healthy attempts"
    ]


def test_a_stack_wide_error_only_some_jobs_break_keeps_their_names() -> None:
    """Retention must outlast each job's retries: the one whose retries it does not outlast is named."""
    quick = valid_job(name="quick", retry={"retryCount": 1, "minBackoffSeconds": 60})
    (line,) = _lines(error_of(valid_values(retentionSeconds=300, jobs=[valid_job(), quick])))
    assert line.startswith(f"{NAMESPACE}:retentionSeconds: job 'every-5': retention 300s ends before")


@pytest.mark.parametrize(
    ("spelled", "meant"),
    [
        ("jobs/x.py:run", "jobs.x:run"),
        ("function/jobs/x.py:run", "jobs.x:run"),
        ("nocolon", "jobs.my_job:run"),
    ],
)
def test_a_handler_that_is_not_module_callable_gets_an_example(spelled: str, meant: str) -> None:
    explained = (
        f"{spelled!r} is not module:callable: the module's dotted import path inside function/, a colon, "
        f"then the function's name, e.g. {meant!r}"
    )
    assert _lines(error_of(valid_values(jobs=[valid_job(handler=spelled)]))) == [
        f"{NAMESPACE}:jobs[0].handler: {explained}"
    ]
    assert f"{NAMESPACE}:jobHandler: {explained}" in error_of(valid_values(jobHandler=spelled))
