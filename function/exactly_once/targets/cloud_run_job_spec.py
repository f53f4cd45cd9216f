"""What the Cloud Run job proxy (jobs/cloud_run_job.py) starts per scheduled job: the one
definition of its fields, their rules and their JSON, which the stack renders into the
function's environment (CLOUD_RUN_JOBS) and the proxy job reads back at start-up. Part of the
Cloud Run job kind: a fork that deletes the kind deletes this module with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from exactly_once.targets.job_tables import ENV_NAME, Problem, raise_first, whole
from exactly_once.targets.resource_names import CLOUD_RUN_JOB_RESOURCE_NAME

CLOUD_RUN_JOBS_ENV = "CLOUD_RUN_JOBS"

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

MAX_TASK_COUNT: Final = 10_000
MAX_TIMEOUT_SECONDS: Final = 86_400  # a Cloud Run job task's longest timeout


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
        if "taskCount" in data and not whole(data["taskCount"], 1, MAX_TASK_COUNT):
            problems.append(
                ("taskCount", f"{data['taskCount']!r} is not a whole number in 1..{MAX_TASK_COUNT}")
            )
        if "timeoutSeconds" in data and not whole(data["timeoutSeconds"], 1, MAX_TIMEOUT_SECONDS):
            problems.append(
                (
                    "timeoutSeconds",
                    f"{data['timeoutSeconds']!r} is not a whole number in 1..{MAX_TIMEOUT_SECONDS}",
                )
            )
        return problems

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CloudRunJobSpec:
        raise_first(cls.check(data))
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
