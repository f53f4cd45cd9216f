"""What a stack's settings put in its functions' environments and job table, and what only
that whole shows.

The function reads its configuration from environment variables whose names its package
defines (exactly_once.config, exactly_once.token_check.settings, the targets' tables), and each
job's policy from the job table (exactly_once.config.JobTable), a file the stack ships in the
function's source: this is the one place that writes both. The environment holds what is per
deployment and the jobs' target tables (CLOUD_RUN_JOBS, BIGQUERY_JOBS), `env` and `secrets`;
the table holds what is per job, which would otherwise outgrow Cloud Run's 32 KiB environment
at a few hundred jobs. The checks that need the rendered environment (one variable set two
ways, a name the function reads itself, Cloud Run's size limit) live here too, since only the
whole environment shows them.
"""

from __future__ import annotations

import json
from typing import Any, Final

from exactly_once.audit.config import REGION_ENV, AuditConfig
from exactly_once.config import (
    DATABASE_ENV,
    JOB_HANDLER_ENV,
    JOB_TABLE_ENV,
    JOB_TABLE_FILE,
    LEASE_SECONDS_ENV,
    PROJECT_ENV,
    RETENTION_SECONDS_ENV,
    RUNS_COLLECTION_ENV,
    TIME_LIMIT_ENV,
    JobPolicy,
    JobTable,
    OverlapPolicy,
)
from exactly_once.endpoints import ENDPOINT_VARIABLES, ID_TOKEN_DISABLED_ENV
from exactly_once.targets.job_tables import render_table
from exactly_once.token_check.settings import COLLECTION_ENV as TOKEN_COLLECTION_ENV
from exactly_once.token_check.settings import RETENTION_ENV as TOKEN_RETENTION_ENV
from infra.settings.stack import StackSettings
from infra.settings.timing_checks import number_text
from policy.scheduler_guardrails.rules.config.access import SecretReference
from policy.scheduler_guardrails.rules.environment_size import environment_size_problem
from policy.scheduler_guardrails.rules.targets.registry import kind_of

# Set by the function's test harnesses and switches: a job's `env` may not take them either.
# REGION_ENV too: a one-region stack leaves it unset, and a job that took it would break the
# stack's second region later.
_FUNCTION_SWITCHES: Final = frozenset({*ENDPOINT_VARIABLES, ID_TOKEN_DISABLED_ENV, REGION_ENV})


def token_check_environment(settings: StackSettings) -> dict[str, str]:
    """The token-check function's environment, by the names exactly_once.token_check and
    exactly_once.config read."""
    return {
        PROJECT_ENV: settings.project,
        DATABASE_ENV: settings.database_name,
        TOKEN_COLLECTION_ENV: settings.idempotency_collection,
        TOKEN_RETENTION_ENV: number_text(settings.idempotency_retention_seconds),
    }


def function_environment(settings: StackSettings, region: str | None = None) -> dict[str, str]:
    """The environment variables of the function in `region`, by the names
    function/exactly_once/config.py reads, plus the jobs' targets and settings."""
    return {**stack_environment(settings, region), **jobs_environment(settings)}


def stack_environment(settings: StackSettings, region: str | None = None) -> dict[str, str]:
    """What the stack sets besides the jobs. A two-region stack names each function's region
    (REGION_ENV), which picks its own region's catch-up queue from the job table; a one-region
    stack's function needs no name, and gets none. Without `region`, the longest region's name:
    what the size check must count."""
    env = {
        PROJECT_ENV: settings.project,
        DATABASE_ENV: settings.database_name,
        RUNS_COLLECTION_ENV: settings.runs_collection,
        LEASE_SECONDS_ENV: str(settings.lease_seconds),
        TIME_LIMIT_ENV: number_text(settings.time_limit_seconds),
        RETENTION_SECONDS_ENV: number_text(settings.retention_seconds),
        JOB_HANDLER_ENV: settings.job_handler,
        # A path relative to the deployed source's root, where the stack puts the table.
        JOB_TABLE_ENV: JOB_TABLE_FILE,
    }
    if len(settings.regions) > 1:
        env[REGION_ENV] = region or max(settings.regions, key=len)
    return env


def job_table(settings: StackSettings, audit: AuditConfig | None = None) -> JobTable:
    """Each job's policy by deployed job id, as the function reads it from JOB_TABLE_FILE;
    `audit` is the missed-run audit's configuration (infra/plan/audit_job.py). Every job of the
    stack is named, one that sets nothing of its own with the defaults (it runs JOB_HANDLER under
    the function's limits): the function refuses, unclaimed, a delivery of a job the table does
    not name, such as a renamed job's old Scheduler job firing while `pulumi up` runs."""
    handlers, limits = settings.job_handlers(), settings.job_time_limits()
    deadlines, overlap = settings.job_starting_deadlines(), settings.job_overlap()
    run_keys = settings.job_run_keys()
    jobs = {}
    for job in settings.jobs:
        name = settings.scheduler_job_id(job)
        policy = JobPolicy(
            handler=handlers.get(name),
            time_limit_seconds=limits.get(name),
            starting_deadline_seconds=deadlines.get(name),
            overlap=OverlapPolicy(overlap.get(name, OverlapPolicy.ALLOW)),
            run_key=run_keys.get(name),
            pause_after_failures=job.pause_after_failures,
            time_zone=job.time_zone,
        )
        jobs[name] = policy
    raw_audit = None if audit is None else json.loads(audit.to_json())
    return JobTable(jobs=jobs, audit=raw_audit, names_every_job=True)


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
    problem = environment_size_problem(env, function_secrets(settings))
    if problem is not None:
        errors.append(f"{key('jobs')}: {problem}")
    return errors
