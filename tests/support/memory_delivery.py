"""A function instance in memory: ScheduledRunHandler on a MemoryRunStore (which passes the
Firestore store's conformance suite), its ledger, job locks and job statuses all on that store and
its clock. Delivery logic is tested here in milliseconds, with faults placed between two RPCs;
the emulator keeps the conformance suite and the end-to-end tests through real servers."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from exactly_once.config import JobPolicy
from exactly_once.context import RunContext
from exactly_once.delivery.handler import ScheduledRunHandler
from exactly_once.delivery.outcomes import Reply
from exactly_once.delivery.overlap import JobLocks
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import RunLedger
from exactly_once.run_key import format_rfc3339
from exactly_once.testing.memory_store import MemoryRunStore
from tests.support.attempts import EndedAttempts

RUNS = "scheduler_runs"
LEASE = timedelta(seconds=30)
RETENTION = timedelta(hours=1)


def scheduler_headers(schedule_time: datetime, job: str = "nightly") -> dict[str, str]:
    return {
        JOB_NAME_HEADER: job,
        SCHEDULE_TIME_HEADER: format_rfc3339(schedule_time),
        PROJECT_HEADER: "acme",
        LOCATION_HEADER: "europe-west1",
    }


class MemoryInstance:
    """One function instance on `store`: its own warm cache and attempt ids; `jobs` is its job
    table's policies and `pause_after_failures` its table's pauseAfterFailures, by job name."""

    _ids = itertools.count(1)

    def __init__(
        self,
        store: MemoryRunStore,
        job: Callable[[RunContext], Any],
        *,
        jobs: Mapping[str, JobPolicy] | None = None,
        pause_after_failures: Mapping[str, int] | None = None,
    ) -> None:
        self.store = store
        self.logs = io.StringIO()
        self.ended = EndedAttempts()
        clock = store.clock
        ledger = RunLedger(
            store, lease=LEASE, retention=RETENTION, clock=clock.now, monotonic=clock.monotonic
        )
        locks = JobLocks(store, lease=LEASE, retention=RETENTION, clock=clock.now, deadline_seconds=5)
        self.statuses = JobStatuses(store, RUNS, pause_after_failures)
        self.handler = ScheduledRunHandler(
            ledger,
            job,
            new_attempt_id=lambda: f"attempt-{next(self._ids)}",
            time_limit_seconds=60,
            end_attempt=self.ended,
            jobs=jobs,
            locks=locks,
            statuses=self.statuses,
            log_stream=self.logs,
        )

    def deliver(self, schedule_time: datetime, job: str = "nightly") -> Reply:
        return self.handler.handle("POST", scheduler_headers(schedule_time, job), b"")

    def lines(self, event: str) -> list[dict[str, Any]]:
        """The log lines of this instance with `event`."""
        parsed = [json.loads(line) for line in self.logs.getvalue().splitlines() if line.startswith("{")]
        return [line for line in parsed if line.get("event") == event]


def run_id_at(schedule_time: datetime, job: str = "nightly") -> str:
    return run_key_from_headers(scheduler_headers(schedule_time, job)).run_id
