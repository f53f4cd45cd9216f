"""What a stack's settings put in its functions' environments, and what only that whole shows.

The function reads its configuration from environment variables whose names its package
defines (exactly_once.config, exactly_once.token_check.settings, the targets' tables); this is
the one place that writes them: the stack's values, the jobs' target tables (CLOUD_RUN_JOBS,
BIGQUERY_JOBS) and their `env` and `secrets`. The checks that need the rendered environment
(one variable set two ways, a name the function reads itself, Cloud Run's size limit) live
here too, since only the whole environment shows them.
"""

from __future__ import annotations

import json
from typing import Any, Final

from exactly_once.audit.config import AUDIT_JOBS_ENV
from exactly_once.config import (
    DATABASE_ENV,
    JOB_HANDLER_ENV,
    JOB_HANDLERS_ENV,
    JOB_OVERLAP_ENV,
    JOB_STARTING_DEADLINES_ENV,
    JOB_TIME_LIMITS_ENV,
    LEASE_SECONDS_ENV,
    PROJECT_ENV,
    RETENTION_SECONDS_ENV,
    RUNS_COLLECTION_ENV,
    TIME_LIMIT_ENV,
)
from exactly_once.endpoints import ENDPOINT_VARIABLES, ID_TOKEN_DISABLED_ENV
from exactly_once.targets.job_specs import render_table
from exactly_once.token_check.settings import COLLECTION_ENV as TOKEN_COLLECTION_ENV
from exactly_once.token_check.settings import RETENTION_ENV as TOKEN_RETENTION_ENV
from infra.config.access import SecretReference
from infra.settings.stack import StackSettings
from infra.settings.timing_checks import number_text
from infra.targets.registry import kind_of

# Cloud Run functions: all runtime environment variable names and values together.
MAX_ENVIRONMENT_BYTES: Final = 32 * 1024
# Set by the function's test harnesses and switches: a job's `env` may not take them either.
_FUNCTION_SWITCHES: Final = frozenset({*ENDPOINT_VARIABLES, ID_TOKEN_DISABLED_ENV, AUDIT_JOBS_ENV})


def token_check_environment(settings: StackSettings) -> dict[str, str]:
    """The token-check function's environment, by the names exactly_once.token_check and
    exactly_once.config read."""
    return {
        PROJECT_ENV: settings.project,
        DATABASE_ENV: settings.database_name,
        TOKEN_COLLECTION_ENV: settings.idempotency_collection,
        TOKEN_RETENTION_ENV: number_text(settings.idempotency_retention_seconds),
    }


def function_environment(settings: StackSettings) -> dict[str, str]:
    """The function's environment variables, by the names function/exactly_once/config.py
    reads, plus the jobs' targets and settings."""
    return {**stack_environment(settings), **jobs_environment(settings)}


def stack_environment(settings: StackSettings) -> dict[str, str]:
    env = {
        PROJECT_ENV: settings.project,
        DATABASE_ENV: settings.database_name,
        RUNS_COLLECTION_ENV: settings.runs_collection,
        LEASE_SECONDS_ENV: str(settings.lease_seconds),
        TIME_LIMIT_ENV: number_text(settings.time_limit_seconds),
        RETENTION_SECONDS_ENV: number_text(settings.retention_seconds),
        JOB_HANDLER_ENV: settings.job_handler,
    }
    if handlers := settings.job_handlers():
        env[JOB_HANDLERS_ENV] = json.dumps(handlers, sort_keys=True)
    if overlap := settings.job_overlap():
        env[JOB_OVERLAP_ENV] = json.dumps(overlap, sort_keys=True)
    if limits := settings.job_time_limits():
        env[JOB_TIME_LIMITS_ENV] = json.dumps(limits, sort_keys=True)
    if deadlines := settings.job_starting_deadlines():
        env[JOB_STARTING_DEADLINES_ENV] = json.dumps(deadlines, sort_keys=True)
    return env


def target_tables(settings: StackSettings) -> dict[str, str]:
    """Each target kind's table (CLOUD_RUN_JOBS, BIGQUERY_JOBS, ...): its jobs' specs by
    deployed scheduled job id, as the function's proxies read them."""
    tables: dict[str, dict[str, Any]] = {}
    for job in settings.jobs:
        if job.target is None or (name := kind_of(job.target).environment_variable) is None:
            continue
        entry = kind_of(job.target).table_entry(job.target, job.name, settings.placement)
        tables.setdefault(name, {})[settings.scheduler_job_id(job)] = entry
    return {name: render_table(table) for name, table in tables.items()}


def function_secrets(settings: StackSettings) -> dict[str, SecretReference]:
    """Every job's `secrets`, as the function's secret environment variables."""
    return {name: ref for job in settings.jobs for name, ref in job.access.secrets.items()}


def jobs_environment(settings: StackSettings) -> dict[str, str]:
    """What the jobs add to the function's environment: their targets' tables and `env`."""
    env = {name: value for job in settings.jobs for name, value in job.access.env.items()}
    env.update(target_tables(settings))
    return env


def access_errors(settings: StackSettings, stack_env: dict[str, str]) -> list[str]:
    """What only the whole stack shows, phrased with config keys: one variable set two ways,
    a name the stack sets itself, and an environment over Cloud Run's limit. `stack_env` is
    what the stack sets besides the jobs."""
    key = settings.config_key
    errors: list[str] = []
    owners: dict[str, tuple[str, object]] = {}
    for index, job in enumerate(settings.jobs):
        named: list[tuple[str, object]] = [(f"env.{n}", v) for n, v in job.access.env.items()]
        named += [(f"secrets.{n}", ref) for n, ref in job.access.secrets.items()]
        for field, value in named:
            name = field.split(".", 1)[1]
            here = key(f"jobs[{index}].{field}")
            if name in stack_env or name in _FUNCTION_SWITCHES:
                errors.append(f"{here}: {name} is a variable the function itself reads; choose another name")
            elif name in owners and owners[name][1] != value:
                errors.append(
                    f"{here}: {name} is also {owners[name][0]} with another value; one function serves "
                    "every job, so a variable has one value (prefix it with the job's name)"
                )
            owners.setdefault(name, (key(f"jobs[{index}].{field}"), value))
    env = {**stack_env, **jobs_environment(settings)}
    size = sum(len(n.encode()) + len(v.encode()) for n, v in env.items())
    size += sum(len(name.encode()) for name in function_secrets(settings))
    if size > MAX_ENVIRONMENT_BYTES:
        largest = max(env, key=lambda name: len(env[name]))
        errors.append(
            f"{key('jobs')}: the function's environment would be {size} bytes, over Cloud Run's "
            f"{MAX_ENVIRONMENT_BYTES}; the largest variable is {largest} ({len(env[largest])} bytes). "
            "Keep long queries in a view or stored procedure and call that."
        )
    return errors
