"""A job's `cloudRunJob` and `bigquery` settings: the job starts one Cloud Run job execution or
one BigQuery query job per scheduled run, through the function (jobs/cloud_run_job.py,
jobs/bigquery_job.py), never by Cloud Scheduler calling the API.

Validated key by key (errors name the config key) with the rules the function itself applies
(exactly_once/targets/job_specs.py), then rendered into the function's environment
(CLOUD_RUN_JOBS, BIGQUERY_JOBS) by infra/settings/stack.py.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from exactly_once.targets.job_specs import (
    BIGQUERY_HANDLER,
    CLOUD_RUN_HANDLER,
    BigQueryJobSpec,
    CloudRunJobSpec,
)
from exactly_once.targets.resource_names import BIGQUERY_DATASET, CLOUD_RUN_JOB_ID
from infra.config.schema import ConfigProblems

CLOUD_RUN_KEYS = ("sample", "job", "args", "env", "taskCount", "timeoutSeconds")
BIGQUERY_KEYS = (
    "sample",
    "query",
    "location",
    "destinationTable",
    "writeDisposition",
    "labels",
    "readDatasets",
    "writeDatasets",
)
TARGET_KEYS = ("workflow", "cloudRunJob", "bigquery")
# The sample BigQuery job: one row per run appended to a table of the stack's sample dataset,
# so `SELECT run_id, COUNT(*) ... GROUP BY run_id HAVING COUNT(*) > 1` shows exactly-once.
SAMPLE_QUERY = (
    "SELECT @run_id AS run_id, @schedule_time AS schedule_time, @job_name AS job_name, "
    "CURRENT_TIMESTAMP() AS ran_at"
)


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
    handler: ClassVar[str] = CLOUD_RUN_HANDLER

    def resource_name(self, project: str, region: str, sample_name: str) -> str:
        name = sample_name if self.sample else str(self.job)
        return name if "/" in name else f"projects/{project}/locations/{region}/jobs/{name}"

    def spec(self, job: str) -> CloudRunJobSpec:
        return CloudRunJobSpec(job, self.args, dict(self.env), self.task_count, self.timeout_seconds)


@dataclass(frozen=True)
class BigQueryTarget:
    """`sample: true` (the stack's sample dataset and query) or `query` and `location`.
    `readDatasets`/`writeDatasets` (and the destination table's dataset) are where the
    runtime account gets dataset-level access."""

    sample: bool
    query: str = SAMPLE_QUERY
    location: str | None = None  # None: the stack's region (sample only)
    destination_table: str | None = None
    write_disposition: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    read_datasets: tuple[str, ...] = ()
    write_datasets: tuple[str, ...] = ()
    handler: ClassVar[str] = BIGQUERY_HANDLER

    def spec(self, project: str, region: str, sample_table: str) -> BigQueryJobSpec:
        table = sample_table if self.sample else self.destination_table
        disposition = "WRITE_APPEND" if self.sample else self.write_disposition
        return BigQueryJobSpec(
            project, self.location or region, self.query, table, disposition, dict(self.labels)
        )

    def datasets(self, sample_table: str) -> tuple[dict[str, str], ...]:
        """Dataset -> the narrowest role the job needs on it ("write" wins over "read")."""
        written = list(self.write_datasets)
        table = sample_table if self.sample else self.destination_table
        if table is not None:
            written.append(table.rsplit(".", 1)[0])
        roles = {dataset: "read" for dataset in self.read_datasets}
        roles.update({dataset: "write" for dataset in written})
        return tuple({"dataset": dataset, "access": access} for dataset, access in sorted(roles.items()))


JobTarget = CloudRunJobTarget | BigQueryTarget


def parse_target(item: Mapping[str, Any], prefix: str, errors: ConfigProblems) -> JobTarget | None:
    """The job's `cloudRunJob` or `bigquery` setting, if any; at most one target per job."""
    present = [key for key in TARGET_KEYS if key in item]
    if len(present) > 1:
        shown = ", ".join(f"{prefix}.{key}" for key in present)
        errors.append(f"{errors.key(prefix)}: set one of {shown}: a job starts one kind of thing")
        return None
    if "cloudRunJob" in item:
        return _cloud_run_job(item["cloudRunJob"], f"{prefix}.cloudRunJob", errors)
    if "bigquery" in item:
        return _bigquery(item["bigquery"], f"{prefix}.bigquery", errors)
    return None


def check_target_job(target: JobTarget, handler: Any, body: Any, prefix: str, errors: ConfigProblems) -> str:
    """The handler a job with a target runs: the target's proxy (another is refused); its
    settings come from the stack, so a `body` is refused too."""
    key = "cloudRunJob" if isinstance(target, CloudRunJobTarget) else "bigquery"
    if body is not None:
        errors.append(
            f"{errors.key(f'{prefix}.body')}: a job with {key} sends no body: the function reads "
            f"its settings from {prefix}.{key}"
        )
    if handler is not None and handler != target.handler:
        errors.append(
            f"{errors.key(f'{prefix}.handler')}: {handler!r} cannot start the job's {key}; "
            f"leave it out (it defaults to {target.handler})"
        )
    return target.handler


def _unknown(raw: Mapping[str, Any], key: str, known: tuple[str, ...], errors: ConfigProblems) -> None:
    """Each unknown key, with the known one it most resembles (`timeout`: `timeoutSeconds`)."""
    for name in raw:
        if name in known:
            continue
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; expected one of {', '.join(known)}"
        errors.append(f"{errors.key(f'{key}.{name}')}: unknown key{hint}")


def _sample_or_named(raw: Mapping[str, Any], key: str, named: str, errors: ConfigProblems) -> bool | None:
    sample = raw.get("sample", False)
    if not isinstance(sample, bool):
        errors.append(f"{errors.key(f'{key}.sample')}: expected true or false, got {sample!r}")
        return None
    if sample and named in raw:
        errors.append(f"{errors.key(key)}: set either sample: true or {named}, not both")
    elif not sample and named not in raw:
        errors.append(f"{errors.key(key)}: set sample: true (deploy the stack's sample) or {named}")
    return sample is True


def _cloud_run_job(raw: Any, key: str, errors: ConfigProblems) -> CloudRunJobTarget | None:
    if not isinstance(raw, Mapping):
        errors.append(
            f"{errors.key(key)}: expected an object such as {{job: my-job}} or {{sample: true}}, got {raw!r}"
        )
        return None
    before = len(errors)
    _unknown(raw, key, CLOUD_RUN_KEYS, errors)
    sample = _sample_or_named(raw, key, "job", errors)
    job = raw.get("job")
    # The function's own rules for the rest (an unknown key is reported once, above); a short
    # name stands in for the resource name here.
    checked = {k: v for k, v in raw.items() if k in set(CLOUD_RUN_KEYS) - {"sample", "job"}}
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


def _bigquery(raw: Any, key: str, errors: ConfigProblems) -> BigQueryTarget | None:
    if not isinstance(raw, Mapping):
        errors.append(
            f"{errors.key(key)}: expected an object such as {{query: ..., location: EU}}, got {raw!r}"
        )
        return None
    before = len(errors)
    _unknown(raw, key, BIGQUERY_KEYS, errors)
    sample = _sample_or_named(raw, key, "query", errors)
    if sample:
        errors.extend(
            f"{errors.key(f'{key}.{k}')}: the sample writes its own table in the stack's region; leave it out"
            for k in ("location", "destinationTable", "writeDisposition")
            if k in raw
        )
    elif "location" not in raw:
        errors.append(
            f"{errors.key(f'{key}.location')}: required: the BigQuery location the job runs in "
            "(EU, US or a region)"
        )
    # The function's own rules for the query's fields (an unknown key is reported once, above).
    spec_keys = set(BIGQUERY_KEYS) - {"sample", "readDatasets", "writeDatasets"}
    checked = {k: v for k, v in raw.items() if k in spec_keys}
    checked.setdefault("query", SAMPLE_QUERY)
    checked.setdefault("location", "region")
    checked["project"] = "project-id"
    errors.extend(
        f"{errors.key(f'{key}.{name}')}: {problem}" for name, problem in BigQueryJobSpec.check(checked)
    )
    datasets = {
        name: _datasets(raw.get(name, []), f"{key}.{name}", errors)
        for name in ("readDatasets", "writeDatasets")
    }
    if len(errors) > before or sample is None:
        return None
    spec = BigQueryJobSpec.from_json(checked)
    return BigQueryTarget(
        sample=sample,
        query=spec.query,
        location=raw.get("location"),
        destination_table=spec.destination_table,
        write_disposition=spec.write_disposition,
        labels=spec.labels,
        read_datasets=datasets["readDatasets"],
        write_datasets=datasets["writeDatasets"],
    )


def _datasets(raw: Any, key: str, errors: ConfigProblems) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(d, str) and BIGQUERY_DATASET.match(d) for d in raw):
        errors.append(f"{errors.key(key)}: expected a list of <project>.<dataset>, got {raw!r}")
        return ()
    return tuple(raw)
