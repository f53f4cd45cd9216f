"""What job logic receives and how it reports failure.

Job logic runs after the claim and before the finish, outside any transaction, so its side
effects happen at most once per successful claim. Anything it calls downstream should carry
`run_id` as an idempotency key and `fence` to reject stale writers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import strict_json
from config import ConfigError
from google.cloud import firestore


class TerminalJobError(Exception):
    """The run cannot succeed by retrying (bad input, a 4xx from downstream).

    The run is recorded as completed with the error, so Cloud Scheduler stops retrying instead
    of hammering a request that will never work. Any other exception counts as retryable.
    """


@dataclass(frozen=True)
class RunContext:
    run_id: str
    job_name: str
    schedule_time: datetime
    project: str
    location: str
    attempt_id: str
    # The claim's commit time in nanoseconds: grows with every claim of this run, so a
    # downstream store can refuse writes carrying a smaller fence than it has seen.
    fence: int
    body: bytes
    # The instance's client, for jobs that keep their own records in the same database.
    firestore: firestore.Client

    def json_body(self, allowed_fields: Collection[str] | None = None) -> dict[str, Any]:
        """The body as a JSON object ({} when empty). A malformed body (strict JSON: no NaN,
        no infinite numbers, nesting bounded), or one with fields outside `allowed_fields`, is
        terminal: Cloud Scheduler sends the same bytes on every
        retry, and a typo in a field name must not be silently ignored."""
        if not self.body.strip():
            return {}
        try:
            parsed = strict_json.loads(self.body)
        except strict_json.StrictJsonError as error:
            raise TerminalJobError(f"request body is not JSON: {error}") from None
        if not isinstance(parsed, dict):
            raise TerminalJobError("request body must be a JSON object")
        if allowed_fields is not None and (unknown := sorted(set(parsed) - set(allowed_fields))):
            raise TerminalJobError(f"unknown body fields {unknown}; expected {sorted(allowed_fields)}")
        return parsed


JobHandler = Callable[[RunContext], None]


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
    """Picks the job logic for a run: the per-job override, else the default."""

    def __init__(self, default: str, per_job: Mapping[str, str]) -> None:
        self._default = resolve_handler(default, "JOB_HANDLER")
        self._per_job = {
            job: resolve_handler(spec, f"JOB_HANDLERS[{job!r}]") for job, spec in per_job.items()
        }

    def handler_for(self, job_name: str) -> JobHandler:
        return self._per_job.get(job_name, self._default)
