"""The per-job tables a proxy job reads from the function's environment: the stack renders each
kind's specs into one JSON variable ({scheduled job id: spec}) and the proxy job reads them back
at start-up, refusing a malformed table before it serves a run. Shared by every kind with a
table; each kind's spec is a module of its own (`cloud_run_job_spec`, `bigquery_job_spec`).

Standard library only: the stack's config validation checks a job's settings with the same
rules, so a value the function would refuse at start-up is refused before anything is deployed,
naming the config key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

from exactly_once.config import ConfigError

# An environment variable's name, as a container (and the function) can read it.
ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")

# A problem with one field of a spec: (field, what is wrong).
Problem = tuple[str, str]


class JobSpec(Protocol):
    def to_json(self) -> dict[str, Any]: ...


Spec = TypeVar("Spec", bound=JobSpec)


class SpecError(ValueError):
    def __init__(self, problem: Problem) -> None:
        super().__init__(f"{problem[0]}: {problem[1]}")


def raise_first(problems: list[Problem]) -> None:
    if problems:
        raise SpecError(problems[0])


def whole(value: Any, low: int, high: int) -> bool:
    """Whether `value` is a whole number (not a boolean) in low..high."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def render_table(specs: Mapping[str, JobSpec]) -> str:
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
