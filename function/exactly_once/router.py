"""How the job for a run is found: a `module:callable` per job name, else the default.

Handlers are resolved when the instance starts, so a typo stops the instance from starting,
naming the variable, instead of failing every run.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from exactly_once.config import ConfigError
from exactly_once.context import JobHandler, RunContext


def resolve_handler(spec: str, variable: str) -> JobHandler:
    """Import `module:callable` from inside function/ at start-up, so a typo stops the
    instance from starting, naming the variable, instead of failing every run."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(variable, f"cannot import module {module_name!r}: {error}") from None
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise ConfigError(variable, f"{module_name!r} has no callable {attribute!r}")
    return handler  # type: ignore[no-any-return]


class JobRouter:
    """Picks the job logic for a run: the per-job override, else the default. Each is a
    callable, or a `module:callable` string resolved at start-up."""

    def __init__(self, default: str | JobHandler, per_job: Mapping[str, str | JobHandler]) -> None:
        self._default = _handler(default, "JOB_HANDLER")
        self._per_job = {job: _handler(spec, f"JOB_HANDLERS[{job!r}]") for job, spec in per_job.items()}

    def handler_for(self, job_name: str) -> JobHandler:
        return self._per_job.get(job_name, self._default)

    def run(self, context: RunContext) -> Any:
        """The router as one job: what `main.handle_scheduled_job` serves."""
        return self.handler_for(context.job_name)(context)


def _handler(spec: str | JobHandler, variable: str) -> JobHandler:
    return resolve_handler(spec, variable) if isinstance(spec, str) else spec
