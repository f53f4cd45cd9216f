"""The ledger's tests' shared run, leases and store: one RunKey, a ledger on the emulator, and
a store whose create() answers late."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from exactly_once.delivery.scheduler_request import RunKey
from exactly_once.ledger.protocol import Claim, RunInProgress, RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from tests.support.clock import FakeClock
from tests.support.waiting import wait_until

LEASE = timedelta(seconds=70)
SHORT_LEASE = timedelta(seconds=2)  # for tests that wait for a lease to run out
RETENTION = timedelta(hours=1)
KEY = RunKey("acme", "europe-west1", "nightly", datetime(2026, 10, 16, 12, tzinfo=UTC))


def record(db, run_id=KEY.run_id):
    return db.collection("scheduler_runs").document(run_id).get()


def ledger_on(db, clock=None, store=None, lease=LEASE, retention=RETENTION) -> RunLedger:
    store = store or FirestoreRunStore(db, "scheduler_runs")
    return RunLedger(store, lease=lease, retention=retention, clock=clock or FakeClock())


def claim_when_free(ledger: RunLedger, attempt_id: str, timeout: float = 20) -> Claim:
    """Claim as soon as the holder's lease has run out on Firestore's clock."""

    def attempt() -> Claim | None:
        try:
            return ledger.claim(KEY, attempt_id)
        except RunInProgress:
            return None

    return wait_until(attempt, timeout=timeout, what="the lease to run out", interval=0.2)


class DelayedCreate(FirestoreRunStore):
    """The real store, whose create() commits and then holds its answer until released:
    what a slow network or an overloaded client looks like from the claimer's side."""

    def __init__(self, db, collection: str) -> None:
        super().__init__(db, collection)
        self.committed = threading.Event()
        self.answer = threading.Event()

    def create(self, run_id, fields, *, timeout):
        update_time = super().create(run_id, fields, timeout=timeout)
        self.committed.set()
        self.answer.wait(timeout=60)
        return update_time
