"""ScheduledRunHandler in-process on the Firestore emulator, as the delivery tests drive it: a
ledger on a fake wall clock, the watchdog's endings recorded, the log kept in memory."""

from __future__ import annotations

import io
import json
from datetime import timedelta

from exactly_once.delivery.handler import ScheduledRunHandler
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
)
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.router import JobRouter
from tests.support.attempts import EndedAttempts
from tests.support.clock import FakeClock
from tests.support.waiting import wait_until

HEADERS = {
    JOB_NAME_HEADER.lower(): "nightly",
    SCHEDULE_TIME_HEADER.lower(): "2026-10-16T12:00:00Z",
    PROJECT_HEADER.lower(): "acme",
    LOCATION_HEADER.lower(): "europe-west1",
}
LEASE = timedelta(seconds=70)


class Harness:
    """One instance's ScheduledRunHandler for `handler_spec`, attempts named `name`-1, -2..."""

    def __init__(
        self,
        db,
        handler_spec: str,
        store=None,
        lease=LEASE,
        name="attempt",
        time_limit=60.0,
        target="",
        jobs=None,
    ) -> None:
        self.db = db
        self.clock = FakeClock()
        self.ledger = RunLedger(
            store or FirestoreRunStore(db, "scheduler_runs"),
            lease=lease,
            retention=timedelta(hours=1),
            clock=self.clock,
        )
        self.logs = io.StringIO()
        self.ended = EndedAttempts()
        counter = iter(range(1, 1000))
        self.handler = ScheduledRunHandler(
            self.ledger,
            JobRouter(handler_spec, {}).run,
            new_attempt_id=lambda: f"{name}-{next(counter)}",
            time_limit_seconds=time_limit,
            end_attempt=self.ended,
            jobs=jobs,
            target=target,
            log_stream=self.logs,
        )

    def deliver(self, headers=HEADERS, body=b"", method="POST"):
        return self.handler.handle(method, headers, body)

    def deliver_when_free(self, **kwargs):
        """Deliver until the holder's lease has run out (on Firestore's clock)."""

        def attempt():
            reply = self.deliver(**kwargs)
            return reply if reply.status != 409 else None

        return wait_until(attempt, timeout=20, what="the lease to run out", interval=0.2)

    def log_lines(self):
        return [json.loads(line) for line in self.logs.getvalue().splitlines()]

    def runs(self):
        return list(self.db.collection("scheduler_runs").stream())
