"""How the job for a run is found: the job table's `module:callable` for the job name, else
the deployment's JOB_HANDLER, else none: the run fails, naming the job.

Handlers are resolved when the instance starts, so a typo stops the instance from starting,
naming the table's key or the variable, instead of failing every run.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exactly_once.config import JOB_HANDLER_ENV, JOB_TABLE_ENV, ConfigError
from exactly_once.context import JobHandler, RunContext
from exactly_once.errors import TerminalJobError

# Where @exactly_once builds the HTTP view it returns in place of the job (decorator.py). Found
# by file, not imported: the view wraps the job (functools.wraps), so the file its code was
# compiled from is what tells a served function from the job it serves.
_DECORATOR_SOURCE = Path(__file__).with_name("decorator.py").resolve()


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
    return checked_handler(handler, variable)


def checked_handler(handler: JobHandler, variable: str) -> JobHandler:
    """Refuse a function decorated with @exactly_once: it is an HTTP function of its own, and
    the router would hand it a RunContext where it reads a request, failing every run."""
    layer: Any = handler
    for _ in range(32):  # a chain of functools.wraps layers, bounded
        code = getattr(layer, "__code__", None)
        if (
            code is not None
            and hasattr(layer, "__wrapped__")
            and Path(code.co_filename).resolve() == _DECORATOR_SOURCE
        ):
            name = getattr(handler, "__name__", repr(handler))
            raise ConfigError(
                variable,
                f"{name} is decorated with @exactly_once, which serves it as an HTTP function of its own; "
                "the router already runs every handler exactly once: name the undecorated function",
            )
        layer = getattr(layer, "__wrapped__", None)
        if layer is None:
            break
    return handler


class JobRouter:
    """Picks the job logic for a run: the job's own handler, else the default, else none.
    Each is a callable, or a `module:callable` string resolved at start-up. A job with no
    handler fails terminally (retrying cannot help before a redeploy), naming the job; there
    is no built-in default, so a job the deployment forgot never runs a demo in its place."""

    def __init__(self, default: str | JobHandler | None, per_job: Mapping[str, str | JobHandler]) -> None:
        self._default = None if default is None else _handler(default, JOB_HANDLER_ENV)
        self._per_job = {
            job: _handler(spec, f"{JOB_TABLE_ENV} jobs[{job!r}].handler") for job, spec in per_job.items()
        }

    def handler_for(self, job_name: str) -> JobHandler:
        handler = self._per_job.get(job_name, self._default)
        if handler is None:
            raise TerminalJobError(
                f"no handler for job {job_name!r}: the job table ({JOB_TABLE_ENV}) does not name it "
                f"and {JOB_HANDLER_ENV} is not set"
            )
        return handler

    def run(self, context: RunContext) -> Any:
        """The router as one job: what `main.handle_scheduled_job` serves."""
        return self.handler_for(context.job_name)(context)


def _handler(spec: str | JobHandler, variable: str) -> JobHandler:
    return resolve_handler(spec, variable) if isinstance(spec, str) else checked_handler(spec, variable)
