"""Exactly-once processing of Cloud Scheduler runs on Cloud Run, with a Firestore ledger.

    import functions_framework
    from exactly_once import RunContext, exactly_once

    @functions_framework.http
    @exactly_once
    def nightly_report(run: RunContext) -> dict[str, str] | None:
        ...

The package, room by room (function/README.md holds the rooms' table and the direction they
import in: each room imports only the rooms before it):

- shared: `run_key` (the run's identity), `errors`, `strict_json`, `log_fields`,
  `structured_log`, `once`, `config`, `endpoints`, `loopback`.
- `ledger`: the run records in Firestore and the claim / renew / finish protocol over them,
  and the downstream work a run started, kept on its record.
- job: `context` (what a job receives) and `run_writes` (the Firestore writes a job stages
  for its run's completing commit).
- `delivery`: one delivery of a run, from its HTTP request to its answer (`handler`), and
  what keeps a run to one attempt at a time: the lease's heartbeat and watchdog, the per-job
  overlap lock, the instance's memory of completed runs, following a run's downstream work.
- serving: `decorator` (`@exactly_once`), `router` (which handler runs a job), this module.

The extensions, which the core above never imports:

- `token_check`: idempotency tokens for a downstream step (a workflow, a service) that may
  be called twice for one run.
- `targets`: what the shipped proxy jobs share (error classification, call timeouts, job
  specs, names); each proxy job registers how to follow the work it starts.
- `audit`: the missed-run audit, which compares the schedule with the ledger, and the
  catch-up that delivers a job's missed runs again.

Names are loaded on first use, so `import exactly_once.config` (which the Pulumi program and
the policy pack do) costs nothing beyond the standard library, and an instance imports the
Firestore client only when it serves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.5.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "PreviousRun": "exactly_once.ledger.previous_run",
    "RunContext": "exactly_once.context",
    "TerminalJobError": "exactly_once.errors",
    "RetryableJobError": "exactly_once.errors",
    "exactly_once": "exactly_once.decorator",
    "firestore_client": "exactly_once.decorator",
    "json_response": "exactly_once.decorator",
    "request_body": "exactly_once.decorator",
}

__all__ = [
    "PreviousRun",
    "RetryableJobError",
    "RunContext",
    "TerminalJobError",
    "__version__",
    "exactly_once",
    "firestore_client",
    "json_response",
    "request_body",
]

if TYPE_CHECKING:
    from exactly_once.context import RunContext
    from exactly_once.decorator import exactly_once, firestore_client, json_response, request_body
    from exactly_once.errors import RetryableJobError, TerminalJobError
    from exactly_once.ledger.previous_run import PreviousRun


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'exactly_once' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
