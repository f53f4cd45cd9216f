"""What a Cloud Run job or BigQuery proxy job starts for a scheduled job: the one definition of
the fields, their rules and their JSON, which the stack renders into the function's environment
(CLOUD_RUN_JOBS, BIGQUERY_JOBS) and the job modules read back at start-up.

Standard library only: the stack's config validation checks a job's `cloudRunJob` and
`bigquery` settings with these same rules, so a value the function would refuse at start-up
is refused before anything is deployed, naming the config key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from exactly_once.config import ConfigError
from exactly_once.targets.resource_names import BIGQUERY_TABLE, CLOUD_RUN_JOB_RESOURCE_NAME

CLOUD_RUN_JOBS_ENV = "CLOUD_RUN_JOBS"
BIGQUERY_JOBS_ENV = "BIGQUERY_JOBS"
# The proxy jobs that ship in jobs/, one per target kind: what the stack names as handlers.
WORKFLOWS_HANDLER: Final = "jobs.workflows:start_workflow_execution"
CLOUD_RUN_HANDLER: Final = "jobs.cloud_run_job:run_cloud_run_job"
BIGQUERY_HANDLER: Final = "jobs.bigquery_job:run_bigquery_job"

# What an execution's container receives, set as environment overrides on every execution the
# proxy starts: the run's token, its fence, and what it is a run of. The proxy also finds the
# execution of a run by RUN_ID.
RUN_ID_ENV: Final = "RUN_ID"
FENCE_ENV: Final = "FENCE"
SCHEDULE_TIME_ENV: Final = "SCHEDULE_TIME"
SCHEDULER_JOB_ENV: Final = "SCHEDULER_JOB"
RUN_ENV_NAMES: Final = frozenset({RUN_ID_ENV, FENCE_ENV, SCHEDULE_TIME_ENV, SCHEDULER_JOB_ENV})
# Names Cloud Run sets itself or refuses.
_PLATFORM_ENV_PREFIXES: Final = ("CLOUD_RUN_", "X_GOOGLE_", "K_")
_PLATFORM_ENV_NAMES: Final = frozenset({"PORT"})
ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")

MAX_TASK_COUNT: Final = 10_000
MAX_TIMEOUT_SECONDS: Final = 86_400  # a Cloud Run job task's longest timeout
WRITE_DISPOSITIONS: Final = ("WRITE_APPEND", "WRITE_TRUNCATE", "WRITE_EMPTY")
# BigQuery label keys and values: lower-case letters, digits, '_' and '-'; keys start with a letter.
_LABEL_KEY: Final = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE: Final = re.compile(r"^[a-z0-9_-]{0,63}$")
_JOB_ID_CHARACTER: Final = re.compile(r"[^A-Za-z0-9_-]")

# A problem with one field of a spec: (field, what is wrong).
Problem = tuple[str, str]


def check_container_env(env: Any) -> list[Problem]:
    """A Cloud Run job's `env` overrides: names a container can read, none the proxy or Cloud
    Run sets itself."""
    if not isinstance(env, Mapping):
        return [("env", f"expected an object of NAME: value, got {env!r}")]
    problems: list[Problem] = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            problems.append((f"env.{name}", "is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"))
        elif name in RUN_ENV_NAMES:
            problems.append((f"env.{name}", "is set by the proxy on every execution (the run's token)"))
        elif name.startswith(_PLATFORM_ENV_PREFIXES) or name in _PLATFORM_ENV_NAMES:
            problems.append((f"env.{name}", "is reserved by Cloud Run"))
        elif not isinstance(value, str):
            problems.append((f"env.{name}", f"expected a string, got {value!r}"))
    return problems


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


@dataclass(frozen=True)
class CloudRunJobSpec:
    """One execution per run of `job` (projects/P/locations/L/jobs/J), with these overrides."""

    job: str
    args: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    task_count: int | None = None
    timeout_seconds: int | None = None

    @staticmethod
    def check(data: Mapping[str, Any]) -> list[Problem]:
        """Every problem of the JSON (or config) fields, by field name."""
        problems: list[Problem] = []
        unknown = sorted(set(data) - {"job", "args", "env", "taskCount", "timeoutSeconds"})
        problems += [(key, "unknown field") for key in unknown]
        job = data.get("job")
        if not isinstance(job, str) or not CLOUD_RUN_JOB_RESOURCE_NAME.match(job):
            problems.append(("job", f"{job!r} is not projects/<project>/locations/<location>/jobs/<job>"))
        args = data.get("args")
        if args is not None and (not isinstance(args, list) or not all(isinstance(a, str) for a in args)):
            problems.append(("args", f"expected a list of strings, got {args!r}"))
        problems += check_container_env(data.get("env", {}))
        if "taskCount" in data and not _whole(data["taskCount"], 1, MAX_TASK_COUNT):
            problems.append(
                ("taskCount", f"{data['taskCount']!r} is not a whole number in 1..{MAX_TASK_COUNT}")
            )
        if "timeoutSeconds" in data and not _whole(data["timeoutSeconds"], 1, MAX_TIMEOUT_SECONDS):
            problems.append(
                (
                    "timeoutSeconds",
                    f"{data['timeoutSeconds']!r} is not a whole number in 1..{MAX_TIMEOUT_SECONDS}",
                )
            )
        return problems

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CloudRunJobSpec:
        _raise_first(cls.check(data))
        args = data.get("args")
        return cls(
            job=data["job"],
            args=tuple(args) if args is not None else None,
            env=dict(data.get("env", {})),
            task_count=data.get("taskCount"),
            timeout_seconds=data.get("timeoutSeconds"),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job": self.job}
        if self.args is not None:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = dict(self.env)
        if self.task_count is not None:
            out["taskCount"] = self.task_count
        if self.timeout_seconds is not None:
            out["timeoutSeconds"] = self.timeout_seconds
        return out


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
        _raise_first(cls.check(data))
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


class SpecError(ValueError):
    def __init__(self, problem: Problem) -> None:
        super().__init__(f"{problem[0]}: {problem[1]}")


def _raise_first(problems: list[Problem]) -> None:
    if problems:
        raise SpecError(problems[0])


Spec = TypeVar("Spec", CloudRunJobSpec, BigQueryJobSpec)


def render_table(specs: Mapping[str, CloudRunJobSpec | BigQueryJobSpec]) -> str:
    """The environment value: {scheduled job id: spec}, compact and sorted (stable diffs)."""
    return json.dumps(
        {name: spec.to_json() for name, spec in specs.items()}, sort_keys=True, separators=(",", ":")
    )


def read_table(
    env: Mapping[str, str], variable: str, parse: Callable[[Mapping[str, Any]], Spec]
) -> dict[str, Spec]:
    """The table `variable` holds; a malformed one stops the instance, naming the variable,
    the job and the field. Unset is an empty table: a run of a job missing from it fails
    terminally, naming the job."""
    raw = env.get(variable, "").strip()
    if not raw:
        return {}
    try:
        table = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ConfigError(variable, f"is not JSON: {error}") from None
    if not isinstance(table, dict):
        raise ConfigError(variable, "must be a JSON object of scheduled job id: settings")
    specs: dict[str, Spec] = {}
    for name, data in table.items():
        if not isinstance(data, dict):
            raise ConfigError(variable, f"[{name!r}] must be an object")
        try:
            specs[name] = parse(data)
        except SpecError as error:
            raise ConfigError(variable, f"[{name!r}].{error}") from None
    return specs
