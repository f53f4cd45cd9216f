"""Function instances in-process on the emulator, each with its own counted Firestore client,
ledger, job locks and warm cache; and a job that holds its run open until released."""

from __future__ import annotations

import io
import itertools
import threading
from datetime import timedelta

from exactly_once.config import JobPolicy, OverlapPolicy
from exactly_once.delivery.handler import ScheduledRunHandler
from exactly_once.delivery.overlap import JobLocks
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
)
from exactly_once.delivery.warm_cache import CompletedRuns
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from localrun.firestore_rpcs import counted_emulator_client
from tests.support.attempts import EndedAttempts
from tests.support.clock import FakeClock

LEASE = timedelta(seconds=70)


def headers(job: str = "nightly", time: str = "2026-10-16T12:00:00Z") -> dict[str, str]:
    return {
        JOB_NAME_HEADER: job,
        SCHEDULE_TIME_HEADER: time,
        PROJECT_HEADER: "acme",
        LOCATION_HEADER: "europe-west1",
    }


def policies(overlap, starting_deadlines) -> dict[str, JobPolicy]:
    """The job table's policies of the jobs a test gives an overlap policy or a deadline."""
    return {
        job: JobPolicy(
            overlap=OverlapPolicy(overlap.get(job, OverlapPolicy.ALLOW)),
            starting_deadline_seconds=starting_deadlines.get(job),
        )
        for job in {*overlap, *starting_deadlines}
    }


class Instance:
    """One function instance: its own counted client, ledger, locks and warm cache."""

    _ids = itertools.count(1)

    def __init__(
        self,
        emulator_host,
        project,
        job,
        overlap=None,
        lease=LEASE,
        clock=None,
        starting_deadlines=None,
        pause_after_failures=None,
    ) -> None:
        self.client, self.rpcs = counted_emulator_client(emulator_host, project)
        store = FirestoreRunStore(self.client, "scheduler_runs")
        self.clock = clock or FakeClock()
        ledger = RunLedger(store, lease=lease, retention=timedelta(hours=1), clock=self.clock)
        self.locks = JobLocks(
            store, lease=lease, retention=timedelta(hours=1), clock=FakeClock(), deadline_seconds=5
        )
        self.logs = io.StringIO()
        self.cache = CompletedRuns()
        self.ended = EndedAttempts()
        self.handler = ScheduledRunHandler(
            ledger,
            job,
            new_attempt_id=lambda: f"attempt-{next(self._ids)}",
            time_limit_seconds=60,
            end_attempt=self.ended,
            jobs=policies(overlap or {}, starting_deadlines or {}),
            locks=self.locks,
            cache=self.cache,
            statuses=JobStatuses(store, "scheduler_runs", pause_after_failures),
            log_stream=self.logs,
        )

    def deliver(self, hdrs=None, body=b""):
        self.rpcs.reset()
        return self.handler.handle("POST", hdrs or headers(), body)

    def cost(self) -> int:
        return sum(self.rpcs.snapshot().values())


class Gate:
    """A job that holds its run open until the test lets it finish."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.finish = threading.Event()
        self.runs: list[str] = []

    def __call__(self, run):
        self.runs.append(run.schedule_time.isoformat())
        if len(self.runs) == 1:
            self.started.set()
            assert self.finish.wait(timeout=60)
        return {"run": len(self.runs)}


def hold_first_run(instance_under_test, gate) -> threading.Thread:
    thread = threading.Thread(target=instance_under_test.deliver)
    thread.start()
    assert gate.started.wait(timeout=20)
    return thread


SECOND = headers(time="2026-10-16T12:15:00Z")
