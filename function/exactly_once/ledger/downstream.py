"""The work a run started downstream, as the ledger keeps it: its kind, name and state on the
run's record.

A job that starts work elsewhere (a proxy job: a Cloud Run job execution, a workflow, a query)
completes its run when the work has *started*: the ledger vouches for one start per run, not
for the work's success. So the job reports what it started (RunContext.downstream, a
`Downstream`), the run's completing write stores it (`downstream_*` fields), and whoever asks
the downstream API again later updates it (delivery/following.py): a run of a `skip` or `wait`
job finding the previous run's work still held, and the stack's audit job. The audit, `ops
status` and `ops audit` read these fields.

The ledger knows of the work only what it needs: whether it still runs, whether it failed,
and the API's words when it did. A kind is an opaque name chosen by the module that starts
such work, which also registers how to ask about it (delivery/following.py); nothing here
names one.

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
    """One started piece of downstream work: `kind` (the name its starter registered a
    follower under), its resource `name` as its API names it, its `state`, and the API's
    `error` when it failed."""

    kind: str
    name: str
    state: DownstreamState
    error: str | None = None

    @property
    def running(self) -> bool:
        """Still at work: what keeps a `skip` or `wait` job's lock with the run that started it."""
        return not self.state.ended

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
        """What the record says was started; None for a run that started nothing downstream."""
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
