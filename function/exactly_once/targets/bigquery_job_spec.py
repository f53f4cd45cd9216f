"""What the BigQuery proxy (jobs/bigquery_job.py) starts per scheduled job: the one definition
of its fields, their rules and their JSON, which the stack renders into the function's
environment (BIGQUERY_JOBS) and the proxy job reads back at start-up, and the query job's id
for a run. Part of the BigQuery kind: a fork that deletes the kind deletes this module with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from exactly_once.targets.job_tables import Problem, raise_first
from exactly_once.targets.resource_names import BIGQUERY_TABLE

BIGQUERY_JOBS_ENV = "BIGQUERY_JOBS"

WRITE_DISPOSITIONS: Final = ("WRITE_APPEND", "WRITE_TRUNCATE", "WRITE_EMPTY")
# BigQuery label keys and values: lower-case letters, digits, '_' and '-'; keys start with a letter.
_LABEL_KEY: Final = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE: Final = re.compile(r"^[a-z0-9_-]{0,63}$")
_JOB_ID_CHARACTER: Final = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class BigQueryJobSpec:
    """One query job per run, in `project` and `location`, under an id derived from the run."""

    project: str
    location: str
    query: str
    destination_table: str | None = None
    write_disposition: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def check(data: Mapping[str, Any]) -> list[Problem]:
        problems: list[Problem] = []
        known = {"project", "location", "query", "destinationTable", "writeDisposition", "labels"}
        problems += [(key, "unknown field") for key in sorted(set(data) - known)]
        for name in ("project", "location", "query"):
            value = data.get(name)
            if not isinstance(value, str) or not value.strip():
                problems.append((name, f"expected a non-empty string, got {value!r}"))
        table = data.get("destinationTable")
        if table is not None and (not isinstance(table, str) or not BIGQUERY_TABLE.match(table)):
            problems.append(("destinationTable", f"{table!r} is not <project>.<dataset>.<table>"))
        disposition = data.get("writeDisposition")
        if disposition is not None and disposition not in WRITE_DISPOSITIONS:
            problems.append(
                ("writeDisposition", f"{disposition!r} is not one of {', '.join(WRITE_DISPOSITIONS)}")
            )
        if disposition is not None and table is None:
            problems.append(("writeDisposition", "applies to a destinationTable; set one, or leave it out"))
        labels = data.get("labels", {})
        if not isinstance(labels, Mapping):
            problems.append(("labels", f"expected an object, got {labels!r}"))
        else:
            for key, value in labels.items():
                if not isinstance(key, str) or not _LABEL_KEY.match(key):
                    problems.append(
                        (f"labels.{key}", "is not a label key (a-z first, then a-z 0-9 _ -, ≤ 63)")
                    )
                elif not isinstance(value, str) or not _LABEL_VALUE.match(value):
                    problems.append((f"labels.{key}", f"{value!r} is not a label value (a-z 0-9 _ -, ≤ 63)"))
        return problems

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BigQueryJobSpec:
        raise_first(cls.check(data))
        return cls(
            project=data["project"],
            location=data["location"],
            query=data["query"],
            destination_table=data.get("destinationTable"),
            write_disposition=data.get("writeDisposition"),
            labels=dict(data.get("labels", {})),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"project": self.project, "location": self.location, "query": self.query}
        if self.destination_table is not None:
            out["destinationTable"] = self.destination_table
        if self.write_disposition is not None:
            out["writeDisposition"] = self.write_disposition
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


def bigquery_job_id(job_name: str, run_id: str) -> str:
    """The BigQuery job id of a run: the scheduled job's name (for people reading the job
    history; characters BigQuery refuses become '_') and the run id, which alone makes it
    unique. Every delivery of the run computes the same id, and BigQuery refuses a second
    job with an id it has seen in the project, so a run starts one job, whatever is lost."""
    return f"{_JOB_ID_CHARACTER.sub('_', job_name)[:200]}_{run_id}"
