"""The timing rules applied to a stack, phrased with the Pulumi config keys a user edits.

policy/scheduler_guardrails/rules/timing/rules.py names JobTiming and RetryConfig attributes; a user edits
`<project>:jobs[0].retry.retryCount`. This is the one translation between the two, used for
both the errors that refuse a config and the advisories printed beside a deploy.
"""

from __future__ import annotations

from datetime import date

from exactly_once.config import TIME_LIMIT_MARGIN_SECONDS, OverlapPolicy
from exactly_once.targets.call_timeout import CALL_MARGIN_SECONDS, CALL_TIMEOUT_SECONDS
from infra.config.schema import JOBS_KEY
from infra.settings.jobs import RETRY_KEYS, JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.targets.registry import kind_for_handler
from policy.scheduler_guardrails.rules.timing import rules as timing
from policy.scheduler_guardrails.rules.timing.advisories import check_second_region, check_wait_overlap
from policy.scheduler_guardrails.rules.timing.clock_changes import check_clock_changes
from policy.scheduler_guardrails.rules.timing.rules import Violation


def timing_keys(field: str, index: int, own_limit: bool = False) -> tuple[str, ...]:
    """Config keys behind a timing.Violation field; a job's time limit is its own key when the
    job sets one (`own_limit`), else derived from the function timeout."""
    if field.startswith("retry."):
        camel = {attribute: key for key, attribute in RETRY_KEYS.items()}[field.removeprefix("retry.")]
        return (f"jobs[{index}].retry.{camel}",)
    return {
        "schedule": (f"jobs[{index}].schedule",),
        "time_zone": (f"jobs[{index}].timeZone",),
        "attempt_deadline_seconds": (f"jobs[{index}].attemptDeadlineSeconds",),
        "function_timeout_seconds": ("functionTimeoutSeconds",),
        "time_limit_seconds": (f"jobs[{index}].timeLimitSeconds",)
        if own_limit
        else ("functionTimeoutSeconds",),
        "lease_seconds": ("leaseSeconds",),
        "starting_deadline_seconds": (f"jobs[{index}].startingDeadlineSeconds",),
        "retention_seconds": ("retentionSeconds",),
    }[field]


def violation_text(violation: Violation, index: int, job: JobSettings, settings: StackSettings) -> str:
    own_limit = job.time_limit_seconds is not None
    keys = dict.fromkeys(key for field in violation.fields for key in timing_keys(field, index, own_limit))
    return f"{', '.join(settings.config_key(key) for key in keys)}: job {job.name!r}: {violation.message}"


def _stack_level_text(
    violation: Violation, index: int, job: JobSettings, settings: StackSettings
) -> str | None:
    """A violation only stack-wide keys can fix (functionTimeoutSeconds, leaseSeconds), phrased
    without the job: every job breaks it alike, and the user has one key to edit, not one per
    job. None when a key of the job's own is involved."""
    own_limit = job.time_limit_seconds is not None
    keys = dict.fromkeys(key for field in violation.fields for key in timing_keys(field, index, own_limit))
    if any(key.startswith(f"{JOBS_KEY}[") for key in keys):
        return None
    return f"{', '.join(settings.config_key(key) for key in keys)}: {violation.message}"


def _once(settings: StackSettings, violations: list[tuple[int, JobSettings, Violation]]) -> list[str]:
    """Each finding once: a stack-wide one whose message is the same for every job is shown
    without a job; one whose message depends on the job (a retention each job's retries
    outlive differently) keeps the job's name."""
    texts: dict[str, list[str]] = {}
    for index, job, violation in violations:
        stack_level = _stack_level_text(violation, index, job, settings)
        if stack_level is not None:
            texts.setdefault(stack_level, []).append(violation_text(violation, index, job, settings))
        else:
            texts.setdefault(violation_text(violation, index, job, settings), [])
    lines: list[str] = []
    for text, per_job in texts.items():
        shared = len(per_job) == len(settings.jobs)
        lines.extend([text] if not per_job or shared else per_job)
    return list(dict.fromkeys(lines))


def number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def timing_errors(settings: StackSettings) -> list[str]:
    """Every job's non-advisory timing violations, each once (a stack-wide one once in all)."""
    return _once(
        settings,
        [
            (index, job, violation)
            for index, job in enumerate(settings.jobs)
            for violation in timing.check_job_timing(settings.job_timing(job))
            if not violation.advisory
        ],
    )


def timing_advisories(settings: StackSettings, today: date | None = None) -> list[str]:
    """Every job's advisory findings: its own timing, its overlap policy, its proxy's calls, and
    its runs in an hour its zone skips or repeats in the year from `today` (by default the
    machine's today: a test passes a date of its own, so its clock changes stay put)."""
    advisories = _once(
        settings,
        [
            (index, job, violation)
            for index, job in enumerate(settings.jobs)
            for violation in timing.check_job_timing(settings.job_timing(job))
            if violation.advisory
        ],
    )
    advisories.extend(
        violation_text(violation, index, job, settings)
        for index, job in enumerate(settings.jobs)
        if job.overlap == OverlapPolicy.WAIT
        for violation in check_wait_overlap(settings.job_timing(job))
    )
    if settings.second_region:
        advisories.extend(
            violation_text(violation, index, job, settings)
            for index, job in enumerate(settings.jobs)
            for violation in check_second_region(settings.job_timing(job))
        )
    advisories.extend(call_timeout_advisories(settings))
    since = today if today is not None else date.today()
    advisories.extend(
        violation_text(violation, index, job, settings)
        for index, job in enumerate(settings.jobs)
        for violation in check_clock_changes(settings.job_timing(job), since)
    )
    return advisories


def call_timeout_advisories(settings: StackSettings) -> list[str]:
    """A proxy job whose attempt is shorter than a whole call: each call's timeout is cut to
    what the attempt has left (exactly_once/targets/call_timeout.py). Advisory, not an error:
    nothing is lost or doubled (a call cut short fails retryably, the run is released and
    retried), but a slow API can fail every attempt where a longer one would have waited."""
    advisories: list[str] = []
    for index, job in enumerate(settings.jobs):
        kind = kind_for_handler(settings.handler_of(job))
        limit = settings.job_time_limit(job)
        if kind is None or limit >= CALL_TIMEOUT_SECONDS + CALL_MARGIN_SECONDS:
            continue
        api = kind.service
        own_limit = job.time_limit_seconds is not None
        # In the terms of the key named: the job's own limit, or the function timeout that the
        # attempt's limit is derived from (TIME_LIMIT_MARGIN_SECONDS shorter).
        shown, margin = (
            (limit, CALL_MARGIN_SECONDS)
            if own_limit
            else (settings.function_timeout_seconds, CALL_MARGIN_SECONDS + TIME_LIMIT_MARGIN_SECONDS)
        )
        keys = timing_keys("time_limit_seconds", index, own_limit)
        call, minimum = number_text(CALL_TIMEOUT_SECONDS), number_text(CALL_TIMEOUT_SECONDS + margin)
        advisories.append(
            f"{', '.join(settings.config_key(key) for key in keys)}: job {job.name!r}: "
            f"{number_text(shown)}s is shorter than the {api} call timeout {call}s + {number_text(margin)}s "
            "kept back by the attempt: a slower call is cut short to end with the attempt, and the run "
            f"is retried; set at least {minimum}"
        )
    return advisories
