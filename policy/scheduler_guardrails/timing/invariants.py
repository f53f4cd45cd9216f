"""The timing rules across a Scheduler job and its function, as two stack policies.

- scheduler-timing-invariants: lease, retries and retention fit together, so no run is lost
  (retries that end inside the lease) or doubled (records that expire before the last retry);
- scheduler-timing-advisories: the attempt deadline matches the job's time limit + 5 s, every
  job's function can be told, and retries fit the schedule; and which rules could not be judged
  because the job table the function ships is not known yet (a first preview).

One validator per enforcement level: a stack policy has a single level, and a fork must be
able to silence advisories without silencing the rules that protect runs. Each message names
the engine properties to change and how; the rules themselves are rules/timing/rules.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs

from exactly_once.config import (
    JOB_TABLE_ENV,
    LEASE_SECONDS_ENV,
    RETENTION_SECONDS_ENV,
    TIME_LIMIT_ENV,
)

from ..engine.functions import ledger_functions
from ..engine.types import SCHEDULER_JOB, resources_of
from ..rules.timing import rules as timing
from .reading import JobPlan, plan_job

# Where a job's starting deadline is, in the config and in the table the function ships.
_DEADLINE: Final = "startingDeadlineSeconds (the job table's starting_deadline_seconds)"

# Reported per resource, with that resource's URN, by scheduler-job-schedule-and-deadline.
_RULES_CHECKED_PER_RESOURCE: Final = frozenset({"unix-cron", "attempt-deadline-range"})

# The rules that read what the job table holds (reading.TABLE_FIELDS: the job's own time limit
# and starting deadline), in the order rules/timing/rules.py applies them: without the table they
# are not judged, and the advisories say so.
RULES_NEEDING_THE_TABLE: Final = (
    "time-limit-before-timeout",
    "deadline-matches-timeout",
    "starting-deadline-range",
    "starting-deadline-admits-retries",
    "starting-deadline-crash-recovery",
)

_FIELD_PROPERTIES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "schedule": "Job.schedule",
        "attempt_deadline_seconds": "Job.attemptDeadline",
        "function_timeout_seconds": "Function.serviceConfig.timeoutSeconds",
        "time_limit_seconds": (f"the job table's jobs[<job>].time_limit_seconds (else {TIME_LIMIT_ENV})"),
        "lease_seconds": f"Function.serviceConfig.environmentVariables.{LEASE_SECONDS_ENV}",
        "starting_deadline_seconds": ("the job table's jobs[<job>].starting_deadline_seconds"),
        "retention_seconds": f"Function.serviceConfig.environmentVariables.{RETENTION_SECONDS_ENV}",
        "retry.retry_count": "Job.retryConfig.retryCount",
        "retry.min_backoff_seconds": "Job.retryConfig.minBackoffDuration",
        "retry.max_backoff_seconds": "Job.retryConfig.maxBackoffDuration",
        "retry.max_doublings": "Job.retryConfig.maxDoublings",
        "retry.max_retry_duration_seconds": "Job.retryConfig.maxRetryDuration",
    }
)

_RULE_FIXES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "function-timeout-range": "set serviceConfig.timeoutSeconds between 1 and 3600",
        "retry-count-range": "set retryConfig.retryCount between 0 and 5",
        "backoff-range": "set 0 < retryConfig.minBackoffDuration <= retryConfig.maxBackoffDuration",
        "retry-non-negative": "make retryConfig.maxDoublings and maxRetryDuration zero or positive",
        "lease-renewable": f"raise {LEASE_SECONDS_ENV} to at least 10 (the stack's default is 30)",
        "time-limit-before-timeout": (
            f"keep {TIME_LIMIT_ENV} and each job table entry's time_limit_seconds (the job's "
            "timeLimitSeconds) at most serviceConfig.timeoutSeconds - 5"
        ),
        "retry-outlives-lease": (
            "raise retryConfig.retryCount, minBackoffDuration or maxDoublings so the last retry arrives "
            f"after the lease, or lower {LEASE_SECONDS_ENV}"
        ),
        "retention-outlives-retries": (
            f"raise {RETENTION_SECONDS_ENV} past the latest retry, or shorten the retry window"
        ),
        "starting-deadline-range": f"set the job's {_DEADLINE} to at least 10",
        "starting-deadline-admits-retries": (
            f"raise the job's {_DEADLINE} to at least retryConfig.minBackoffDuration"
        ),
        "starting-deadline-crash-recovery": (
            f"raise the job's {_DEADLINE} past the first retry after the lease, or lower {LEASE_SECONDS_ENV}"
        ),
        "deadline-matches-timeout": "set attemptDeadline to the job's time limit + 5 s",
        "retries-fit-schedule": (
            "schedule the job less often, or lower retryConfig.retryCount, the backoffs or attemptDeadline"
        ),
    }
)


def _timing_message(plan: JobPlan, violation: timing.Violation) -> str:
    assert plan.function is not None
    properties = ", ".join(_FIELD_PROPERTIES.get(field, field) for field in violation.fields)
    fix = _RULE_FIXES.get(violation.rule, "change the listed properties until the rule holds")
    return (
        f"Scheduler job '{plan.job.name}' -> function '{plan.function.name}' [{violation.rule}]: "
        f"{violation.message}. Properties: {properties}. Fix: {fix}."
    )


# How the advisories say which rules a first preview could not judge: `make check`, which judges
# the update too, leaves that line out (is_unjudged_notice).
_UNJUDGED: Final = "judged on the update, once the table is known"


def _unjudged_message(function: PolicyResource, jobs: list[str]) -> str:
    """What a first preview could not judge of the timing of `function`'s jobs, and when it is."""
    return (
        f"function '{function.name}': the job table its source ships ({JOB_TABLE_ENV}) is not known yet, "
        f"as in a first preview, so for its Scheduler jobs {', '.join(repr(job) for job in jobs)} the "
        "rules that read a job's own time limit and starting deadline from it were not judged: "
        f"{', '.join(RULES_NEEDING_THE_TABLE)}. Every other timing rule was judged; these are {_UNJUDGED}."
    )


def is_unjudged_notice(message: str) -> bool:
    """True for the advisory that names the rules a preview could not judge without the job
    table: a tool that also runs the pack on the update has judged them there."""
    return _UNJUDGED in message


def timing_validator(advisory: bool) -> Callable[[StackValidationArgs, ReportViolation], None]:
    """One validator per enforcement level: a stack policy has a single level, and a fork must be
    able to silence advisories without silencing the rules that protect runs."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = list(args.resources)
        functions = ledger_functions(resources)
        # By function URN: the function, and its jobs judged without its job table.
        unjudged: dict[str, tuple[PolicyResource, list[str]]] = {}
        for job in resources_of(resources, SCHEDULER_JOB):
            plan = plan_job(job, functions, resources)
            if plan is None:
                continue  # an input is unknown during preview: checked on the update
            if plan.function is None:
                if advisory and functions:
                    report_violation(
                        f"Scheduler job '{job.name}': cannot tell which of {len(functions)} functions its "
                        "httpTarget.uri calls, so its timing was not checked. Point httpTarget.uri at the "
                        "function's url output.",
                        job.urn,
                    )
                continue
            if not advisory:
                for problem in plan.problems:
                    where = f"Scheduler job '{job.name}' -> function '{plan.function.name}'"
                    report_violation(f"{where}: {problem}.", job.urn)
            if plan.unread:
                unjudged.setdefault(plan.function.urn, (plan.function, []))[1].append(job.name)
            if plan.timing is None:
                continue
            for violation in timing.check_job_timing(plan.timing):
                if (
                    violation.advisory == advisory
                    and violation.rule not in _RULES_CHECKED_PER_RESOURCE
                    and not set(violation.fields) & set(plan.unread)
                ):
                    report_violation(_timing_message(plan, violation), job.urn)
        if advisory:
            for function, jobs in unjudged.values():
                report_violation(_unjudged_message(function, jobs), function.urn)

    return validate
