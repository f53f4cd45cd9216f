"""Policies over the whole stack: TTL on the runs and token collections, and the timing
invariants read from each job paired with its function."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from pulumi_policy import (
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
)

from exactly_once.config import DEFAULT_IDEMPOTENCY_COLLECTION, DEFAULT_RUNS_COLLECTION
from infra.timing import rules as timing
from policy.props import (
    DEFAULT_ATTEMPT_DEADLINE_SECONDS,
    DEFAULT_FUNCTION_TIMEOUT_SECONDS,
    FIRESTORE_FIELD,
    FUNCTION_V2,
    MISSING,
    SCHEDULER_JOB,
    TOKEN_CHECK_ENTRY_POINT,
    TTL_FIELD,
    UNKNOWN,
    Absent,
    as_number,
    elements,
    function_env,
    function_env_entry,
    lookup,
    parse_duration_seconds,
    resources_of,
)

# --- stack: runs collection TTL -------------------------------------------------------------


def _field_problems(field: PolicyResource) -> list[str]:
    """Why this expire_at Field does not give the runs collection a working TTL (empty: it does)."""
    problems: list[str] = []
    if lookup(field.props, "ttlConfig") is MISSING:
        problems.append("ttlConfig is missing, so expired run records are never deleted (set ttlConfig: {})")
    index_config = lookup(field.props, "indexConfig")
    if index_config is MISSING:
        problems.append(
            "indexConfig is missing, so expire_at keeps Firestore's default single-field indexes "
            "(a monotonically increasing timestamp: write hot-spots); set indexConfig: {} to exempt it"
        )
    else:
        indexes = elements(index_config, "indexes")
        if isinstance(indexes, list) and indexes:
            problems.append(
                f"indexConfig lists {len(indexes)} index(es); remove them so {TTL_FIELD} is exempt "
                "from indexing"
            )
    return problems


def _is_token_check(function: PolicyResource) -> bool:
    """The token-check function: same source as the dedup function, another entry point. It
    is not a scheduler target and keeps no run records."""
    return bool(lookup(function.props, "buildConfig", "entryPoint") == TOKEN_CHECK_ENTRY_POINT)


def _ledger_functions(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    """Cloud Functions v2 that may be scheduler targets and keep run records."""
    return [f for f in resources_of(resources, FUNCTION_V2) if not _is_token_check(f)]


def _missing_ttl_collections(
    fields: list[PolicyResource], collections: Iterable[str | None]
) -> list[str | None]:
    """The collections (None: "some collection") no expire_at Field covers."""
    return [
        collection
        for collection in collections
        if not any(
            collection is None or lookup(f.props, "collection") in (collection, UNKNOWN) for f in fields
        )
    ]


def _ttl_fields(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    return [
        f
        for f in resources_of(resources, FIRESTORE_FIELD)
        if lookup(f.props, "field") in (TTL_FIELD, UNKNOWN)
    ]


def validate_runs_ttl(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    functions = _ledger_functions(args.resources)
    if not functions and not resources_of(args.resources, SCHEDULER_JOB):
        return  # no run ledger in this stack
    collections: set[str] = set()
    for function in functions:
        collection = function_env(function, "RUNS_COLLECTION")
        if isinstance(collection, str) and collection.strip():
            collections.add(collection.strip())
        elif collection is MISSING:
            collections.add(DEFAULT_RUNS_COLLECTION)
    ttl_fields = _ttl_fields(args.resources)
    for field in ttl_fields:
        for problem in _field_problems(field):
            report_violation(f"Firestore field '{field.name}' ({TTL_FIELD}): {problem}.", field.urn)

    wanted: list[str | None] = [*sorted(collections)] if collections else [None]
    for collection in _missing_ttl_collections(ttl_fields, wanted):
        name = f"'{collection}'" if collection else "of run records"
        shown = repr(collection or "<runs collection>")
        report_violation(
            f"The runs collection {name} has no TTL field: without it run records are kept forever. "
            f"Add gcp.firestore.Field(collection={shown}, field='{TTL_FIELD}', "
            "ttl_config={}, index_config={}).",
            None,
        )


def validate_idempotency_ttl(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Token records expire like run records; the field's own problems (ttlConfig, indexes) are
    reported once, by runs-collection-ttl, which checks every expire_at Field."""
    collections: set[str] = set()
    unknown = False
    for function in resources_of(args.resources, FUNCTION_V2):
        if not _is_token_check(function):
            continue
        collection = function_env(function, "IDEMPOTENCY_COLLECTION")
        if isinstance(collection, str) and collection.strip():
            collections.add(collection.strip())
        elif collection is UNKNOWN:
            unknown = True
        else:
            collections.add(DEFAULT_IDEMPOTENCY_COLLECTION)  # what the function falls back to
    wanted: list[str | None] = [*sorted(collections)]
    if unknown and not collections:
        wanted = [None]
    for collection in _missing_ttl_collections(_ttl_fields(args.resources), wanted):
        shown = repr(collection or "<IDEMPOTENCY_COLLECTION>")
        report_violation(
            f"The token check deploys, but its collection {shown} has no TTL field: token records "
            f"would be kept forever. Add gcp.firestore.Field(collection={shown}, field='{TTL_FIELD}', "
            "ttl_config={}, index_config={}).",
            None,
        )


# --- stack: timing invariants ---------------------------------------------------------------

# Reported per resource, with that resource's URN, by scheduler-job-schedule-and-deadline.
_RULES_CHECKED_PER_RESOURCE: Final = frozenset({"unix-cron", "attempt-deadline-range"})

_FIELD_PROPERTIES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "schedule": "Job.schedule",
        "attempt_deadline_seconds": "Job.attemptDeadline",
        "function_timeout_seconds": "Function.serviceConfig.timeoutSeconds",
        "time_limit_seconds": (
            "Function.serviceConfig.environmentVariables.JOB_TIME_LIMITS[<job>] (else JOB_TIME_LIMIT_SECONDS)"
        ),
        "lease_seconds": "Function.serviceConfig.environmentVariables.LEASE_SECONDS",
        "retention_seconds": "Function.serviceConfig.environmentVariables.RETENTION_SECONDS",
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
        "lease-renewable": "raise LEASE_SECONDS to at least 10 (the stack's default is 30)",
        "time-limit-before-timeout": (
            "keep JOB_TIME_LIMIT_SECONDS and each JOB_TIME_LIMITS entry at most "
            "serviceConfig.timeoutSeconds - 5"
        ),
        "retry-outlives-lease": (
            "raise retryConfig.retryCount, minBackoffDuration or maxDoublings so the last retry arrives "
            "after the lease, or lower LEASE_SECONDS"
        ),
        "retention-outlives-retries": (
            "raise RETENTION_SECONDS past the latest retry, or shorten the retry window"
        ),
        "deadline-matches-timeout": "set attemptDeadline to the job's time limit + 5 s",
        "retries-fit-schedule": (
            "schedule the job less often, or lower retryConfig.retryCount, the backoffs or attemptDeadline"
        ),
    }
)


@dataclass(frozen=True)
class _JobPlan:
    """A job paired with its function and the timing read from both, or the reasons it can't be."""

    job: PolicyResource
    function: PolicyResource | None
    timing: timing.JobTiming | None
    problems: tuple[str, ...] = ()


def _function_for(job: PolicyResource, functions: list[PolicyResource]) -> PolicyResource | None:
    """The function a job calls: by URI, then by engine dependency, then the only function."""
    uri = lookup(job.props, "httpTarget", "uri")
    if isinstance(uri, str):
        for function in functions:
            for path in (("url",), ("serviceConfig", "uri")):
                if _same_endpoint(uri, lookup(function.props, *path)):
                    return function
    dependency_urns = {d.urn for d in job.dependencies}
    for deps in job.property_dependencies.values():
        dependency_urns.update(d.urn for d in deps)
    linked = [f for f in functions if f.urn in dependency_urns]
    if len(linked) == 1:
        return linked[0]
    return functions[0] if len(functions) == 1 else None


def _same_endpoint(uri: str, base: Any) -> bool:
    """True when `uri` is `base` or a path/query below it."""
    if not isinstance(base, str) or not base:
        return False
    base = base.rstrip("/")
    return uri == base or uri.startswith((base + "/", base + "?"))


def _seconds_or_problem(value: Any, default: float, prop: str) -> float | str | Absent:
    """Seconds for a duration property, the default when missing, UNKNOWN, or a problem text."""
    if value is MISSING:
        return default
    if value is UNKNOWN:
        return Absent.UNKNOWN
    seconds: float | None = parse_duration_seconds(value)
    if seconds is None:
        return f"property {prop} {value!r} is not a duration; write it like '10s'"
    return seconds


def _plan(job: PolicyResource, functions: list[PolicyResource]) -> _JobPlan | None:
    """Build JobTiming for one job, or None when something it needs is unknown in preview."""
    function = _function_for(job, functions)
    if function is None:
        return _JobPlan(job, None, None)
    props = job.props
    problems: list[str] = []
    values: dict[str, float] = {}

    deadline = lookup(props, "attemptDeadline")
    if deadline is UNKNOWN:
        return None
    deadline_seconds = (
        DEFAULT_ATTEMPT_DEADLINE_SECONDS if deadline is MISSING else parse_duration_seconds(deadline)
    )
    if deadline_seconds is None:
        return None  # not a duration: reported by scheduler-job-schedule-and-deadline
    values["attempt_deadline_seconds"] = deadline_seconds

    retry_props = lookup(props, "retryConfig")
    if retry_props is UNKNOWN:
        return None
    defaults = timing.RetryConfig()
    for key, prop, default in (
        ("min_backoff_seconds", "minBackoffDuration", defaults.min_backoff_seconds),
        ("max_backoff_seconds", "maxBackoffDuration", defaults.max_backoff_seconds),
        ("max_retry_duration_seconds", "maxRetryDuration", defaults.max_retry_duration_seconds),
    ):
        result = _seconds_or_problem(lookup(retry_props, prop), default, f"retryConfig.{prop}")
        if result is UNKNOWN:
            return None
        if isinstance(result, str):
            problems.append(result)
        elif isinstance(result, float):
            values[key] = result
    counts: dict[str, int] = {}
    for key, prop, int_default in (
        ("retry_count", "retryCount", defaults.retry_count),
        ("max_doublings", "maxDoublings", defaults.max_doublings),
    ):
        raw = lookup(retry_props, prop)
        if raw is UNKNOWN:
            return None
        number = float(int_default) if raw is MISSING else as_number(raw)
        if number is None or number != int(number):
            problems.append(f"property retryConfig.{prop} {raw!r} is not a whole number")
        else:
            counts[key] = int(number)

    service = lookup(function.props, "serviceConfig")
    if service is UNKNOWN:
        return None
    timeout = lookup(service, "timeoutSeconds")
    if timeout is UNKNOWN:
        return None
    timeout_seconds = DEFAULT_FUNCTION_TIMEOUT_SECONDS if timeout is MISSING else as_number(timeout)
    if timeout_seconds is None:
        problems.append(f"function property serviceConfig.timeoutSeconds {timeout!r} is not a number")
    for key, variable in (
        ("lease_seconds", "LEASE_SECONDS"),
        ("time_limit_seconds", "JOB_TIME_LIMIT_SECONDS"),
        ("retention_seconds", "RETENTION_SECONDS"),
    ):
        raw = function_env(function, variable)
        if raw is UNKNOWN:
            return None
        number = None if raw is MISSING else as_number(raw)
        if number is None:
            shown = "is not set" if raw is MISSING else f"{raw!r} is not a number of seconds"
            problems.append(
                f"function property serviceConfig.environmentVariables.{variable} {shown}; set it explicitly "
                "so the timing can be checked"
            )
        else:
            values[key] = number

    own_limit = function_env_entry(function, "JOB_TIME_LIMITS", lookup(props, "name"))
    if own_limit is UNKNOWN:
        return None
    if isinstance(own_limit, str):
        problems.append(own_limit)
    elif isinstance(own_limit, float):
        values["time_limit_seconds"] = own_limit

    if problems or timeout_seconds is None:
        return _JobPlan(job, function, None, tuple(problems))
    schedule = lookup(props, "schedule")
    job_timing = timing.JobTiming(
        schedule=schedule if isinstance(schedule, str) else "",
        attempt_deadline_seconds=values["attempt_deadline_seconds"],
        function_timeout_seconds=timeout_seconds,
        lease_seconds=values["lease_seconds"],
        retention_seconds=values["retention_seconds"],
        time_limit_seconds=values["time_limit_seconds"],
        retry=timing.RetryConfig(
            retry_count=counts["retry_count"],
            max_retry_duration_seconds=values["max_retry_duration_seconds"],
            min_backoff_seconds=values["min_backoff_seconds"],
            max_backoff_seconds=values["max_backoff_seconds"],
            max_doublings=counts["max_doublings"],
        ),
    )
    return _JobPlan(job, function, job_timing)


def _timing_message(plan: _JobPlan, violation: timing.Violation) -> str:
    assert plan.function is not None
    properties = ", ".join(_FIELD_PROPERTIES.get(field, field) for field in violation.fields)
    fix = _RULE_FIXES.get(violation.rule, "change the listed properties until the rule holds")
    return (
        f"Scheduler job '{plan.job.name}' -> function '{plan.function.name}' [{violation.rule}]: "
        f"{violation.message}. Properties: {properties}. Fix: {fix}."
    )


def timing_validator(advisory: bool) -> Callable[[StackValidationArgs, ReportViolation], None]:
    """One validator per enforcement level: a stack policy has a single level, and a fork must be
    able to silence advisories without silencing the rules that protect runs."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        functions = _ledger_functions(args.resources)
        for job in resources_of(args.resources, SCHEDULER_JOB):
            plan = _plan(job, functions)
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
            if plan.timing is None:
                continue
            for violation in timing.check_job_timing(plan.timing):
                if violation.advisory == advisory and violation.rule not in _RULES_CHECKED_PER_RESOURCE:
                    report_violation(_timing_message(plan, violation), job.urn)

    return validate
