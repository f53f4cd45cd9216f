"""The work a proxy run starts downstream (a Cloud Run job execution, a Workflows execution,
a BigQuery job), followed to its end: its name and state on the run's record.

A proxy run completes when its downstream work has *started*: the ledger vouches for one
start per run, not for the work's success. So the record also holds what was started and how
it is doing (`downstream_*` fields), written by the proxy in the run's completing write and
updated afterwards by whoever asks the downstream API again (targets/following.py): a run of
a `skip` or `wait` job finding the previous run's execution still held, and the stack's audit
job. The audit, `ops status` and `ops audit` read these fields.

Standard library only: the missed-run audit's verdicts, the ops CLI and the stack's log
filters read these names without the function's client libraries.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

# The run record's fields.
DOWNSTREAM_KIND: Final = "downstream_kind"
DOWNSTREAM_NAME: Final = "downstream_name"
DOWNSTREAM_STATE: Final = "downstream_state"
DOWNSTREAM_ERROR: Final = "downstream_error"
# Commit time of the write that recorded the state last.
DOWNSTREAM_CHECKED_AT: Final = "downstream_checked_at"

# The kinds, as the stack's config names the targets.
CLOUD_RUN_JOB: Final = "cloudRunJob"
WORKFLOW: Final = "workflow"
BIGQUERY: Final = "bigquery"

# Longest downstream error kept on a record or a log line: the API's words, not a dump.
MAX_ERROR_CHARS: Final = 2000


class DownstreamState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self is not DownstreamState.RUNNING

    @property
    def failed(self) -> bool:
        """What the audit, `ops` and the alert report: the work did not do what it should."""
        return self in (DownstreamState.FAILED, DownstreamState.CANCELLED)


@dataclass(frozen=True)
class Downstream:
    """One started piece of downstream work: `kind` (CLOUD_RUN_JOB, WORKFLOW, BIGQUERY), its
    resource `name` as its API names it, its `state`, and the API's `error` when it failed."""

    kind: str
    name: str
    state: DownstreamState
    error: str | None = None

    def fields(self) -> dict[str, Any]:
        """As the run record holds it."""
        error = self.error[:MAX_ERROR_CHARS] if self.error else None
        return {
            DOWNSTREAM_KIND: self.kind,
            DOWNSTREAM_NAME: self.name,
            DOWNSTREAM_STATE: self.state.value,
            DOWNSTREAM_ERROR: error,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Downstream | None:
        """What the record says was started; None for a run that started nothing downstream
        (or a record written before the fields existed)."""
        kind, name, state = (
            record.get(DOWNSTREAM_KIND),
            record.get(DOWNSTREAM_NAME),
            record.get(DOWNSTREAM_STATE),
        )
        if not isinstance(kind, str) or not isinstance(name, str) or state not in set(DownstreamState):
            return None
        error = record.get(DOWNSTREAM_ERROR)
        return cls(kind, name, DownstreamState(state), error if isinstance(error, str) else None)


class DownstreamReport:
    """What a proxy job started, as it last saw it, for the run's completing write: set from
    the job's thread (RunContext.downstream), read by the handler once the job returned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: Downstream | None = None

    def started(self, downstream: Downstream) -> None:
        with self._lock:
            self._latest = downstream

    @property
    def latest(self) -> Downstream | None:
        with self._lock:
            return self._latest
