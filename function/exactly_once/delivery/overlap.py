"""Per-job overlap policy: one lock document per job, taken after the run is claimed.

`skip` and `wait` jobs hold a job-level lock while a run executes. It is the ledger's
technique on a second document, never a transaction: create() decides who holds it. A lock
is live exactly as long as the run that holds it: a contender reads the holder's run record
and judges its lease on Firestore's clock (exactly_once.ledger.lifecycle.state_of). So
the lock needs no renewal of its own while a long job renews its run's lease, a crashed
holder's lock is free as soon as its run's lease ends, and the next run takes it over with a
compare-and-swap. `allow` jobs never touch it: they keep the two-RPC path.

A proxy run whose downstream work (a Cloud Run job execution, a workflow, a BigQuery job) is
still running when the run completes keeps the lock (delivery/handler.py): the run is over,
its work is not. A contender then asks the downstream API about that work
(delivery/following.py) and finds the lock busy while the work runs, free once it ended; an
API that does not answer counts as the work still running.

The lock lives in the runs collection (its id is a hash, like a run id, and its `expire_at`
lets the TTL policy collect a lock a crashed holder left behind). It carries no `job_name`
or `status` field, so queries for a job's runs never mistake it for one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from exactly_once import log_fields, structured_log
from exactly_once.delivery.following import follow
from exactly_once.errors import error_text
from exactly_once.ledger import lifecycle
from exactly_once.ledger.downstream import DOWNSTREAM_NAME, Downstream
from exactly_once.ledger.protocol import Claim
from exactly_once.ledger.store import COMMIT_TIME, Budget, RecordExists, RunStore, StaleWrite, StoredRecord
from exactly_once.run_key import RunKey


def lock_id(key: RunKey) -> str:
    """The job's lock, keyed like its runs: a job renamed with its run key kept shares one lock
    with the runs of its old name still running."""
    canonical = json.dumps(["job-lock", key.project, key.location, key.key_name], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class JobLock:
    doc_id: str
    update_time: datetime


class JobBusy(Exception):
    """Another run of the job holds a live lock."""

    def __init__(self, holder_run_id: str | None, retry_after_seconds: int) -> None:
        super().__init__(f"run {holder_run_id} of this job is still running")
        self.holder_run_id = holder_run_id
        self.retry_after_seconds = retry_after_seconds


class JobLocks:
    MAX_ROUNDS = 5

    def __init__(
        self,
        store: RunStore,
        *,
        lease: timedelta,
        retention: timedelta,
        clock: Callable[[], datetime],
        deadline_seconds: float,
    ) -> None:
        self._store = store
        self._lease = lease
        self._retention = retention
        self._clock = clock
        self._deadline_seconds = deadline_seconds

    def acquire(self, key: RunKey, claim: Claim) -> JobLock:
        """Hold the job's lock for this run, or raise JobBusy (or a GoogleAPIError)."""
        doc_id = lock_id(key)
        budget = Budget(self._deadline_seconds, f"lock of job {key.job_name!r}")
        record = {
            "lock_job": key.job_name,
            "lock_run_id": claim.run_id,
            "attempt_id": claim.attempt_id,
            "locked_at": COMMIT_TIME,
            "expire_at": self._clock() + self._retention,  # the TTL field, for abandoned locks
        }
        for _ in range(self.MAX_ROUNDS):
            # The table's take from `free`: a create, refused when a lock exists.
            try:
                return JobLock(doc_id, self._store.create(doc_id, record, timeout=budget.left()))
            except RecordExists:
                pass
            stored = self._store.get(doc_id, timeout=budget.left())
            if stored is None:
                continue  # released between our create and our read: free again
            found = stored.fields.get("lock_run_id")
            holder = found if isinstance(found, str) else None
            seconds_left = 0.0
            if holder is not None and holder != claim.run_id:
                seconds_left = self._seconds_left_on_run(holder, budget)
            try:
                lifecycle.take_lock(lifecycle.lock_state(True, holder, claim.run_id, seconds_left))
            except lifecycle.LockBusy:
                raise JobBusy(holder, max(1, math.ceil(seconds_left))) from None
            # From `left` or `ours`: an update conditioned on the lock as read.
            try:
                update_time = self._store.update(
                    doc_id, record, if_updated_at=stored.update_time, timeout=budget.left()
                )
            except StaleWrite:
                continue
            return JobLock(doc_id, update_time)
        raise JobBusy(None, 1)

    def _seconds_left_on_run(self, run_id: str, budget: Budget) -> float:
        """How long the holder's run keeps its lease: zero once it completed, was released,
        or its lease ended unrenewed. A completed run whose downstream work still runs is
        busy for another lease, when the next contender asks again."""
        stored = self._store.get(run_id, timeout=budget.left())
        if stored is not None and lifecycle.is_completed(stored, self._lease):
            return self._lease.total_seconds() if self._downstream_running(run_id, stored, budget) else 0.0
        return lifecycle.seconds_held(stored, self._lease)

    def _downstream_running(self, run_id: str, stored: StoredRecord, budget: Budget) -> bool:
        known = Downstream.from_record(stored.fields)
        if known is None or known.state.ended:
            return False
        try:
            current = follow(self._store, run_id, stored, timeout=budget.left(), seen_by="overlap")
        except Exception as error:  # the API did not answer, or cannot be asked: it may run on
            message = f"could not ask about run {run_id}'s {known.kind} {known.name}: counted as running"
            fields = {
                log_fields.RUN_ID: run_id,
                DOWNSTREAM_NAME: known.name,
                "error": error_text(repr(error)),
            }
            structured_log.emit("WARNING", message, fields)
            return True
        return current is not None and not current.state.ended

    def release(self, lock: JobLock) -> None:
        """Let the next run of the job start. A lock taken over meanwhile (our lease ran out)
        is no longer ours to release."""
        budget = Budget(self._deadline_seconds, "lock release")
        with contextlib.suppress(StaleWrite):
            self._store.delete(lock.doc_id, if_updated_at=lock.update_time, timeout=budget.left())
