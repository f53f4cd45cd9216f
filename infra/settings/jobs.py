"""The `jobs` list of a stack's config: one Cloud Scheduler job each, validated key by key.

Every error names the config key to edit (`<project>:jobs[1].retry.retryCount`). Kept apart
from infra/settings/stack.py, which turns the validated jobs into the stack's settings.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from exactly_once.config import HANDLER_PATTERN, TIME_LIMIT_MARGIN_SECONDS, OverlapPolicy
from exactly_once.targets.resource_names import WORKFLOW_RESOURCE_NAME
from infra.config.access import ACCESS_KEYS, JobAccess, parse_access
from infra.config.schema import JOBS_KEY, ConfigProblems
from infra.targets.kinds import JobTarget, check_target_job, parse_target
from infra.timing.rules import RetryConfig

# The stack's own missed-run audit job (infra/plan/audit_job.py): no configured job may take its name.
AUDIT_JOB_NAME = "missed-run-audit"

# A retry policy that survives a crashed attempt with the default 30 s lease: instant failures
# retry at 15, 45, 105, 225, 465 s, the 45 s one and every later one after the lease has ended,
# so a crashed run is taken over within 45 s.
DEFAULT_RETRY = RetryConfig(
    retry_count=5,
    max_retry_duration_seconds=0.0,
    min_backoff_seconds=15.0,
    max_backoff_seconds=300.0,
    max_doublings=3,
)
DEFAULT_TIME_ZONE = "Etc/UTC"

# What a run of a job does while another run of the same job still holds its lease:
# `allow` runs anyway, `skip` records the run as skipped, `wait` answers 409 until the other
# run has finished (Cloud Scheduler's retries bring it back).
OVERLAP_POLICIES: tuple[OverlapPolicy, ...] = tuple(OverlapPolicy)
DEFAULT_OVERLAP = OverlapPolicy.ALLOW

_JOB_KEYS = (
    "name",
    "schedule",
    "timeZone",
    "attemptDeadlineSeconds",
    "timeLimitSeconds",
    "retry",
    "body",
    "handler",
    "workflow",
    "overlap",
    # A Cloud Run job or BigQuery target (infra/targets/kinds.py), and what the job needs
    # (infra/config/access.py).
    "cloudRunJob",
    "bigquery",
    *ACCESS_KEYS,
)
_WORKFLOW_KEYS = ("sample", "name", "argument")

# The Workflows proxy job (function/jobs/workflows.py). Its call timeout is every proxy's
# (exactly_once/targets/call_timeout.py), which the timing advisory reads (infra/settings/timing_checks.py).
WORKFLOWS_HANDLER = "jobs.workflows:start_workflow_execution"
WORKFLOWS_HANDLER_MODULE = WORKFLOWS_HANDLER.split(":")[0]
RETRY_KEYS = {
    "retryCount": "retry_count",
    "maxRetryDurationSeconds": "max_retry_duration_seconds",
    "minBackoffSeconds": "min_backoff_seconds",
    "maxBackoffSeconds": "max_backoff_seconds",
    "maxDoublings": "max_doublings",
}
_INTEGER_RETRY_FIELDS = {"retry_count", "max_doublings"}

_JOB_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@dataclass(frozen=True)
class WorkflowSettings:
    """A job's `workflow` setting: the job starts one Workflows execution per scheduled run.

    Either `sample` (the stack deploys infra/samples/workflow.yaml for this job, so its resource
    name is only known to the Pulumi program) or `name` (an existing workflow). `argument`
    becomes the body's `argument`, which the workflow receives as `args.payload`.
    """

    sample: bool
    name: str | None = None
    argument: Mapping[str, Any] | None = None

    def body(self, workflow: str) -> dict[str, Any]:
        """The job body jobs.workflows:start_workflow_execution reads, for `workflow`."""
        body: dict[str, Any] = {"workflow": workflow}
        if self.argument is not None:
            body["argument"] = dict(self.argument)
        return body


@dataclass(frozen=True)
class JobSettings:
    """One Cloud Scheduler job of the stack."""

    name: str
    schedule: str
    time_zone: str
    attempt_deadline_seconds: float
    retry: RetryConfig
    # How long one attempt's job may run (timeLimitSeconds); None: the function's whole limit.
    time_limit_seconds: float | None = None
    body: Mapping[str, Any] | None = None
    handler: str | None = None
    workflow: WorkflowSettings | None = None
    overlap: OverlapPolicy = DEFAULT_OVERLAP
    target: JobTarget | None = None
    access: JobAccess = dataclasses.field(default_factory=JobAccess)

    @property
    def sample_workflow(self) -> bool:
        """True when the stack deploys a sample workflow for this job."""
        return self.workflow is not None and self.workflow.sample

    def body_bytes(self, sample_workflow: str | None = None) -> bytes | None:
        """The exact request body Cloud Scheduler sends (and the local scheduler replays).

        A job with a sample workflow needs that workflow's resource name, which only the
        Pulumi program knows (`sample_workflow`); without it there is no body to send yet.
        """
        body = self.body
        if self.workflow is not None and self.workflow.sample:
            body = self.workflow.body(sample_workflow) if sample_workflow else None
        if body is None:
            return None
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _number(value: Any, key: str, errors: ConfigProblems, *, integer: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.append(f"{errors.key(key)}: expected a number, got {value!r}")
        return None
    if integer and value != int(value):
        errors.append(f"{errors.key(key)}: expected a whole number, got {value!r}")
        return None
    return float(value)


def parse_jobs(raw: Any, function_timeout: float, errors: ConfigProblems) -> tuple[JobSettings, ...]:
    if raw is None or raw == []:
        errors.append(f"{errors.key(JOBS_KEY)}: at least one job is required")
        return ()
    if not isinstance(raw, list):
        errors.append(f"{errors.key(JOBS_KEY)}: expected a list of jobs, got {raw!r}")
        return ()
    jobs = [job for index, item in enumerate(raw) if (job := _job(item, index, function_timeout, errors))]
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.name in seen:
            errors.append(
                f"{errors.key(f'jobs[{index}].name')}: {job.name!r} is already "
                f"the name of jobs[{seen[job.name]}]"
            )
        seen.setdefault(job.name, index)
    return tuple(jobs)


def _job(item: Any, index: int, function_timeout: float, errors: ConfigProblems) -> JobSettings | None:
    prefix = f"jobs[{index}]"
    if not isinstance(item, Mapping):
        errors.append(f"{errors.key(prefix)}: expected an object, got {item!r}")
        return None
    before = len(errors)
    errors.extend(f"{errors.key(f'{prefix}.{key}')}: unknown job key" for key in item if key not in _JOB_KEYS)

    name = item.get("name")
    if not isinstance(name, str) or not _JOB_NAME.match(name):
        errors.append(f"{errors.key(f'{prefix}.name')}: {name!r} must be 1-100 of A-Z, a-z, 0-9, '-', '_'")
    schedule = item.get("schedule")
    if not isinstance(schedule, str):
        errors.append(f"{errors.key(f'{prefix}.schedule')}: expected a unix-cron string, got {schedule!r}")
    time_zone = item.get("timeZone", DEFAULT_TIME_ZONE)
    if not isinstance(time_zone, str) or not _known_time_zone(time_zone):
        errors.append(f"{errors.key(f'{prefix}.timeZone')}: {time_zone!r} is not an IANA time zone")
    time_limit = _time_limit(item, prefix, errors)
    # Cloud Scheduler waits as long as the job may run: its own limit, else the function's.
    own_timeout = function_timeout if time_limit is None else time_limit + TIME_LIMIT_MARGIN_SECONDS
    deadline = _number(
        item.get("attemptDeadlineSeconds", own_timeout), f"{prefix}.attemptDeadlineSeconds", errors
    )
    retry = _retry(item.get("retry", {}), f"{prefix}.retry", errors)
    body = item.get("body")
    if body is not None and not isinstance(body, Mapping):
        errors.append(f"{errors.key(f'{prefix}.body')}: expected a JSON object, got {body!r}")
    handler = item.get("handler")
    if handler is not None and (not isinstance(handler, str) or not HANDLER_PATTERN.match(handler)):
        errors.append(f"{errors.key(f'{prefix}.handler')}: {handler!r} is not module:callable")
    workflow = _workflow(item.get("workflow"), prefix, errors) if "workflow" in item else None
    overlap = item.get("overlap", DEFAULT_OVERLAP)
    if overlap not in OVERLAP_POLICIES:
        errors.append(
            f"{errors.key(f'{prefix}.overlap')}: {overlap!r} is not one of {', '.join(OVERLAP_POLICIES)}"
        )
    if workflow is not None:
        if body is not None:
            errors.append(
                f"{errors.key(f'{prefix}.body')}: a job with a workflow sends the workflow body; "
                f"put the workflow's input in {prefix}.workflow.argument instead"
            )
        if handler is not None and handler != WORKFLOWS_HANDLER:
            errors.append(
                f"{errors.key(f'{prefix}.handler')}: {handler!r} cannot start the job's workflow; "
                f"leave it out (it defaults to {WORKFLOWS_HANDLER})"
            )
        handler = WORKFLOWS_HANDLER
        if workflow.name is not None:
            body = workflow.body(workflow.name)
    target = parse_target(item, prefix, errors)
    access = parse_access(item, prefix, errors)
    if target is not None:
        handler = check_target_job(target, handler, body, prefix, errors)

    if len(errors) > before or deadline is None or retry is None:
        return None
    return JobSettings(
        name=str(name),
        schedule=str(schedule),
        time_zone=str(time_zone),
        attempt_deadline_seconds=deadline,
        retry=retry,
        time_limit_seconds=time_limit,
        body=dict(body) if body is not None else None,
        handler=handler,
        workflow=workflow,
        overlap=OverlapPolicy(overlap),
        target=target,
        access=access,
    )


def _time_limit(item: Mapping[str, Any], prefix: str, errors: ConfigProblems) -> float | None:
    """A job's own time limit (timeLimitSeconds); the timing rules bound it by the function's."""
    if "timeLimitSeconds" not in item:
        return None
    return _number(item["timeLimitSeconds"], f"{prefix}.timeLimitSeconds", errors)


def _workflow(raw: Any, prefix: str, errors: ConfigProblems) -> WorkflowSettings | None:
    """A job's `workflow` setting: exactly one of `sample: true` or `name`, plus `argument`."""
    key = f"{prefix}.workflow"
    if not isinstance(raw, Mapping):
        errors.append(
            f"{errors.key(key)}: expected an object such as {{sample: true}} or "
            f"{{name: projects/<p>/locations/<l>/workflows/<w>}}, got {raw!r}"
        )
        return None
    before = len(errors)
    errors.extend(f"{errors.key(f'{key}.{k}')}: unknown workflow key" for k in raw if k not in _WORKFLOW_KEYS)
    sample = raw.get("sample", False)
    if not isinstance(sample, bool):
        errors.append(f"{errors.key(f'{key}.sample')}: expected true or false, got {sample!r}")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not WORKFLOW_RESOURCE_NAME.match(name)):
        errors.append(
            f"{errors.key(f'{key}.name')}: {name!r} is not projects/<project>/locations/<location>/"
            "workflows/<workflow>"
        )
    if sample is True and name is not None:
        errors.append(f"{errors.key(key)}: set either sample: true or name, not both")
    elif sample is not True and name is None and len(errors) == before:
        errors.append(
            f"{errors.key(key)}: set sample: true (deploy the sample workflow) or name "
            "(an existing workflow's projects/<p>/locations/<l>/workflows/<w>)"
        )
    argument = raw.get("argument")
    if argument is not None and not isinstance(argument, Mapping):
        errors.append(f"{errors.key(f'{key}.argument')}: expected a JSON object, got {argument!r}")
    if len(errors) > before:
        return None
    return WorkflowSettings(
        sample=sample is True,
        name=name,
        argument=dict(argument) if argument is not None else None,
    )


def check_workflow_jobs(
    raw: Any, jobs: tuple[JobSettings, ...], default_handler: str, errors: ConfigProblems
) -> None:
    """A job handled by the Workflows proxy without a `workflow` setting must carry the body
    that proxy reads; a wrong body would only show up as a terminal failure at run time."""
    if not isinstance(raw, list):
        return
    indexes = {item.get("name"): index for index, item in enumerate(raw) if isinstance(item, Mapping)}
    for job in jobs:
        if job.workflow is not None or (job.handler or default_handler) != WORKFLOWS_HANDLER:
            continue
        key = errors.key(f"jobs[{indexes.get(job.name, '?')}].body")
        body = job.body or {}
        workflow = body.get("workflow")
        unknown = sorted(set(body) - {"workflow", "argument"})
        if not isinstance(workflow, str) or not WORKFLOW_RESOURCE_NAME.match(workflow):
            errors.append(
                f"{key}: job {job.name!r} runs {WORKFLOWS_HANDLER}, which needs body.workflow = "
                "projects/<p>/locations/<l>/workflows/<w> (or set workflow: {sample: true} / {name: ...})"
            )
        elif unknown or not isinstance(body.get("argument", {}), Mapping):
            errors.append(
                f"{key}: job {job.name!r}: the Workflows proxy body is {{workflow, argument?: object}}, "
                f"got fields {sorted(body)}"
            )


def _retry(raw: Any, prefix: str, errors: ConfigProblems) -> RetryConfig | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{errors.key(prefix)}: expected an object, got {raw!r}")
        return None
    before = len(errors)
    errors.extend(
        f"{errors.key(f'{prefix}.{key}')}: unknown retry key" for key in raw if key not in RETRY_KEYS
    )
    fields: dict[str, float] = {}
    for key, field in RETRY_KEYS.items():
        if key in raw:
            number = _number(raw[key], f"{prefix}.{key}", errors, integer=field in _INTEGER_RETRY_FIELDS)
            if number is not None:
                fields[field] = number
    if len(errors) > before:
        return None
    return RetryConfig(
        retry_count=int(fields.get("retry_count", DEFAULT_RETRY.retry_count)),
        max_retry_duration_seconds=fields.get(
            "max_retry_duration_seconds", DEFAULT_RETRY.max_retry_duration_seconds
        ),
        min_backoff_seconds=fields.get("min_backoff_seconds", DEFAULT_RETRY.min_backoff_seconds),
        max_backoff_seconds=fields.get("max_backoff_seconds", DEFAULT_RETRY.max_backoff_seconds),
        max_doublings=int(fields.get("max_doublings", DEFAULT_RETRY.max_doublings)),
    )


def _known_time_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        # Without a tz database on this machine we cannot judge; Cloud Scheduler will.
        return not available_timezones()
    return True
