"""`bigquery:` — one BigQuery query job per scheduled run (function/jobs/bigquery_job.py).

`sample: true` (the stack's sample dataset and query) or `query` and `location`. The job id
derives from the run id, so a redelivered run finds its job instead of starting another. The
runtime account gets dataset-level access on `readDatasets`, `writeDatasets` and the
destination table's dataset, and the one project role a query job cannot do without.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from exactly_once.targets.bigquery_job_spec import BIGQUERY_JOBS_ENV, BigQueryJobSpec
from exactly_once.targets.resource_names import BIGQUERY_DATASET

from ..config.access import ResourceGrant
from ..config.grants import DATASET_READER, DATASET_WRITER
from ..config.problems import ConfigProblems, unknown_keys
from .kind import Placement, SampleJob, TargetKind, sample_or_named

KEYS: Final = (
    "sample",
    "query",
    "location",
    "destinationTable",
    "writeDisposition",
    "labels",
    "readDatasets",
    "writeDatasets",
)
# The proxy job (function/jobs/bigquery_job.py) every job of this kind runs.
BIGQUERY_HANDLER: Final = "jobs.bigquery_job:run_bigquery_job"
BIGQUERY_API: Final = "bigquery.googleapis.com"
# The sample BigQuery job: one row per run appended to a table of the stack's sample dataset,
# so `SELECT run_id, COUNT(*) ... GROUP BY run_id HAVING COUNT(*) > 1` shows exactly-once.
SAMPLE_QUERY: Final = (
    "SELECT @run_id AS run_id, @schedule_time AS schedule_time, @job_name AS job_name, "
    "CURRENT_TIMESTAMP() AS ran_at"
)


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


# The runtime account's role on a dataset a job reads or writes (grants.py says why).
_DATASET_ROLES: Final = {"read": DATASET_READER, "write": DATASET_WRITER}


class BigQueryKind(TargetKind):
    key: ClassVar[str] = "bigquery"
    position: ClassVar[int] = 3
    keys: ClassVar[tuple[str, ...]] = KEYS
    field_meanings: ClassVar[Mapping[str, tuple[str, str]]] = {
        "sample": (
            "boolean",
            "`true`: the stack's sample query, appending one row per run to a table of the stack's sample "
            f"dataset (in `gcp:region`). The handler is `{BIGQUERY_HANDLER}`.",
        ),
        "query": (
            "string",
            "Instead of `sample`: GoogleSQL, which may read `@run_id`, `@schedule_time`, `@job_name`. "
            "Keep it short (the function's environment holds it): call a view or procedure.",
        ),
        "location": ("string", "Required with `query`: where the job runs (`EU`, `US`, a region)."),
        "destinationTable": (
            "string",
            f"`<project>.<dataset>.<table>` for the results; its dataset gets `{DATASET_WRITER.role}`.",
        ),
        "writeDisposition": (
            "string",
            "`WRITE_APPEND`, `WRITE_TRUNCATE` or `WRITE_EMPTY` (with a table).",
        ),
        "labels": ("object", "BigQuery job labels (lower-case keys and values)."),
        "readDatasets": (
            "list of strings",
            f"`<project>.<dataset>` the query reads: `{DATASET_READER.role}` on each, nothing more.",
        ),
        "writeDatasets": (
            "list of strings",
            f"`<project>.<dataset>` the query writes with DML: `{DATASET_WRITER.role}` on each.",
        ),
    }
    handler: ClassVar[str] = BIGQUERY_HANDLER
    service: ClassVar[str] = "BigQuery"
    apis: ClassVar[tuple[str, ...]] = (BIGQUERY_API,)
    environment_variable: ClassVar[str | None] = BIGQUERY_JOBS_ENV
    environment_entry: ClassVar[str] = (
        "{project, location, query, destinationTable?, writeDisposition?, labels?}"
    )
    # One row per run appended to a table of the stack's sample dataset.
    sample_job: ClassVar[SampleJob | None] = SampleJob("bigquery-demo", "45 * * * *", {"sample": True})

    def owns(self, target: object) -> bool:
        return isinstance(target, BigQueryTarget)

    def parse(self, raw: Any, key: str, errors: ConfigProblems) -> BigQueryTarget | None:
        return _parse(raw, key, errors)

    def table_entry(self, target: object, job_name: str, where: Placement) -> BigQueryJobSpec:
        assert isinstance(target, BigQueryTarget)
        return target.spec(where.project, where.region, sample_table(job_name, where))

    def grants(self, target: object, job_name: str, where: Placement) -> Iterator[ResourceGrant]:
        assert isinstance(target, BigQueryTarget)
        for dataset in target.datasets(sample_table(job_name, where)):
            yield ResourceGrant("dataset", dataset["dataset"], _DATASET_ROLES[dataset["access"]].role)


def sample_table(job_name: str, where: Placement) -> str:
    """`<project>.<dataset>.<table>` a sample BigQuery job appends its runs to."""
    return f"{where.project}.{where.names.sample_dataset_id()}.{where.names.sample_table_id(job_name)}"


def _parse(raw: Any, key: str, errors: ConfigProblems) -> BigQueryTarget | None:
    if not isinstance(raw, Mapping):
        errors.append(
            f"{errors.key(key)}: expected an object such as {{query: ..., location: EU}}, got {raw!r}"
        )
        return None
    before = len(errors)
    unknown_keys(raw, key, KEYS, errors)
    sample = sample_or_named(raw, key, "query", errors)
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
    spec_keys = set(KEYS) - {"sample", "readDatasets", "writeDatasets"}
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


KIND: Final = BigQueryKind()
