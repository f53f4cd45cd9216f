"""`cloudRunJob:` — one Cloud Run job execution per scheduled run (function/jobs/cloud_run_job.py).

`sample: true` (the stack deploys infra/samples/cloud_run_job.py as the job) or `job`: a Cloud
Run job's name in the stack's project and region, or its full resource name. Its settings are
checked with the rules the function applies (exactly_once/targets/cloud_run_job_spec.py) and rendered
into the function's CLOUD_RUN_JOBS table; the runtime account may execute that one job.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from exactly_once.targets.cloud_run_job_spec import CLOUD_RUN_JOBS_ENV, RUN_ENV_NAMES, CloudRunJobSpec
from exactly_once.targets.resource_names import CLOUD_RUN_JOB_ID

from ..config.access import ResourceGrant
from ..config.grants import CLOUD_RUN_JOB_EXECUTOR, CLOUD_RUN_JOB_VIEWER
from ..config.problems import ConfigProblems, unknown_keys
from .kind import Placement, TargetKind, sample_or_named

# The proxy job (function/jobs/cloud_run_job.py) every job of this kind runs.
CLOUD_RUN_HANDLER: Final = "jobs.cloud_run_job:run_cloud_run_job"
KEYS: Final = ("sample", "job", "args", "env", "taskCount", "timeoutSeconds")


@dataclass(frozen=True)
class CloudRunJobTarget:
    """`sample: true` (the stack deploys infra/samples/cloud_run_job.py's job) or `job`: a Cloud
    Run job's name in the stack's project and region, or its full resource name."""

    sample: bool
    job: str | None = None
    args: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    task_count: int | None = None
    timeout_seconds: int | None = None

    def resource_name(self, project: str, region: str, sample_name: str) -> str:
        name = sample_name if self.sample else str(self.job)
        return name if "/" in name else f"projects/{project}/locations/{region}/jobs/{name}"

    def spec(self, job: str) -> CloudRunJobSpec:
        return CloudRunJobSpec(job, self.args, dict(self.env), self.task_count, self.timeout_seconds)


class CloudRunJobKind(TargetKind):
    key: ClassVar[str] = "cloudRunJob"
    position: ClassVar[int] = 2
    keys: ClassVar[tuple[str, ...]] = KEYS
    field_meanings: ClassVar[Mapping[str, tuple[str, str]]] = {
        "sample": (
            "boolean",
            "`true`: deploy the sample Cloud Run job for this job (plus the token check). The handler is "
            f"`{CLOUD_RUN_HANDLER}` (any other is rejected); `body` must not be set. "
            "One of `workflow`, `cloudRunJob`, `bigquery` per job.",
        ),
        "job": (
            "string",
            "Instead of `sample`: an existing Cloud Run job, its name (in `gcp:project` and `gcp:region`) "
            "or `projects/<p>/locations/<l>/jobs/<j>`. The runtime account gets "
            f"`{CLOUD_RUN_JOB_EXECUTOR.role}` and `{CLOUD_RUN_JOB_VIEWER.role}` on this job only.",
        ),
        "args": (
            "list of strings",
            "Container args for every execution (`[]` clears the job's own).",
        ),
        "env": (
            "object",
            "Container environment overrides for every execution; "
            f"{', '.join(f'`{name}`' for name in sorted(RUN_ENV_NAMES))} "
            "are the run's own and cannot be set.",
        ),
        "taskCount": ("integer", "Tasks per execution (1..10000); default: the job's."),
        "timeoutSeconds": ("integer", "Task timeout (1..86400 s); default: the job's."),
    }
    handler: ClassVar[str] = CLOUD_RUN_HANDLER
    service: ClassVar[str] = "Cloud Run Admin API"
    environment_variable: ClassVar[str | None] = CLOUD_RUN_JOBS_ENV
    environment_entry: ClassVar[str] = "{job, args?, env?, taskCount?, timeoutSeconds?}"
    # The sample job's container calls the token check from Cloud Run, outside any VPC network.
    sample_calls_token_check: ClassVar[bool] = True
    sample_calls_from_outside_network: ClassVar[bool] = True

    def owns(self, target: object) -> bool:
        return isinstance(target, CloudRunJobTarget)

    def parse(self, raw: Any, key: str, errors: ConfigProblems) -> CloudRunJobTarget | None:
        return _parse(raw, key, errors)

    def table_entry(self, target: object, job_name: str, where: Placement) -> CloudRunJobSpec:
        assert isinstance(target, CloudRunJobTarget)
        return target.spec(resource_name(target, job_name, where))

    def grants(self, target: object, job_name: str, where: Placement) -> Iterator[ResourceGrant]:
        assert isinstance(target, CloudRunJobTarget)
        resource = resource_name(target, job_name, where)
        return (
            ResourceGrant("cloudRunJob", resource, grant.role)
            for grant in (CLOUD_RUN_JOB_EXECUTOR, CLOUD_RUN_JOB_VIEWER)
        )


def resource_name(target: CloudRunJobTarget, job_name: str, where: Placement) -> str:
    """The Cloud Run job the target executes: the stack's sample for the job, or the named one."""
    return target.resource_name(where.project, where.region, where.names.cloud_run_job_name(job_name))


def _parse(raw: Any, key: str, errors: ConfigProblems) -> CloudRunJobTarget | None:
    if not isinstance(raw, Mapping):
        errors.append(
            f"{errors.key(key)}: expected an object such as {{job: my-job}} or {{sample: true}}, got {raw!r}"
        )
        return None
    before = len(errors)
    unknown_keys(raw, key, KEYS, errors)
    sample = sample_or_named(raw, key, "job", errors)
    job = raw.get("job")
    # The function's own rules for the rest (an unknown key is reported once, above); a short
    # name stands in for the resource name here.
    checked = {k: v for k, v in raw.items() if k in set(KEYS) - {"sample", "job"}}
    checked["job"] = "projects/p/locations/l/jobs/x"
    if job is not None and (not isinstance(job, str) or not (CLOUD_RUN_JOB_ID.match(job) or _full_job(job))):
        errors.append(
            f"{errors.key(f'{key}.job')}: {job!r} is not a Cloud Run job name (a-z, 0-9, '-') or "
            "projects/<project>/locations/<location>/jobs/<job>"
        )
    errors.extend(
        f"{errors.key(f'{key}.{name}')}: {problem}" for name, problem in CloudRunJobSpec.check(checked)
    )
    if len(errors) > before or sample is None:
        return None
    spec = CloudRunJobSpec.from_json(checked)
    return CloudRunJobTarget(sample, job, spec.args, spec.env, spec.task_count, spec.timeout_seconds)


def _full_job(job: str) -> bool:
    return not CloudRunJobSpec.check({"job": job})


KIND: Final = CloudRunJobKind()
