"""The common transactional flow, kept only as the benchmark's point of comparison.

It follows the usual read-then-write recipe for deduplicating Scheduler runs where it matters: a
`@firestore.transactional` read-then-write `claim_run`, the job, then a second transaction
`finish_run`, with the sample's status codes (400 / 200 duplicate / 409 / 200 processed, and an
exception, i.e. a 500, when the job or a transaction fails). Two deliberate departures, so both
implementations do equal work and only the ledger protocol differs: the run id and the record
fields are the same as ours, and the Firestore client and job are parameters instead of globals.
Never deploy this: it exists only for `make bench` to measure ours against.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

from google.cloud import firestore

from exactly_once.config import DEFAULT_RUNS_COLLECTION
from exactly_once.delivery.scheduler_request import BadSchedulerRequest, RunKey, run_key_from_headers
from exactly_once.ledger.records import in_progress_record

# Longer than the work takes, and at least the job's attempt deadline.
LEASE = datetime.timedelta(minutes=5)
# Keep records past the job's retry window. A TTL policy on expire_at deletes them.
RETENTION = datetime.timedelta(days=1)


def run_job_logic() -> None:
    """Does the scheduled work. The benchmark's job does nothing, like ours (jobs.noop)."""


@firestore.transactional
def claim_run(
    transaction: firestore.Transaction,
    run_ref: firestore.DocumentReference,
    key: RunKey,
    attempt_id: str,
    now: datetime.datetime,
) -> str:
    """Claims the run unless it's done or another attempt holds the lease."""
    snapshot = run_ref.get(transaction=transaction)
    if snapshot.exists:
        run = snapshot.to_dict() or {}
        if run["status"] == "completed":
            return "completed"
        if run["lease_expires"] > now:
            return "in_progress"
    # Our record, field for field, plus the sample's lease_expires (its lease is on the
    # instance's clock), so both implementations write nearly the same bytes.
    record = in_progress_record(key, attempt_id, now, lease=LEASE, retention=RETENTION)
    transaction.set(run_ref, {**record, "lease_expires": now + LEASE})
    return "claimed"


@firestore.transactional
def finish_run(
    transaction: firestore.Transaction,
    run_ref: firestore.DocumentReference,
    attempt_id: str,
    succeeded: bool,
) -> None:
    """Completes or releases the run, if this attempt still holds the claim."""
    snapshot = run_ref.get(transaction=transaction)
    if not snapshot.exists or (snapshot.to_dict() or {}).get("attempt_id") != attempt_id:
        return  # A retry claimed the run after this attempt's lease expired.
    if succeeded:
        now = datetime.datetime.now(datetime.UTC)
        transaction.update(run_ref, {"status": "completed", "completed_at": now, "result": "succeeded"})
    else:
        transaction.delete(run_ref)


class BaselineHandler:
    """The sample's `handle_scheduled_job`, minus Flask: headers in, (body, status) out.

    Exceptions propagate exactly as in the sample, where the Functions Framework turns them
    into a 500; the benchmark counts them as errors.
    """

    def __init__(
        self,
        db: firestore.Client,
        collection: str = DEFAULT_RUNS_COLLECTION,
        job: Callable[[], None] = run_job_logic,
    ) -> None:
        self._db = db
        self._collection = db.collection(collection)
        self._job = job

    def handle(self, headers: Mapping[str, str]) -> tuple[str, int]:
        """Runs the job's work once per scheduled run, even if the run is delivered twice."""
        try:
            key = run_key_from_headers(headers)
        except BadSchedulerRequest:
            return "error: missing Cloud Scheduler headers", 400

        run_ref = cast(firestore.DocumentReference, self._collection.document(key.run_id))
        now = datetime.datetime.now(datetime.UTC)
        attempt_id = uuid.uuid4().hex

        status: str = claim_run(self._db.transaction(), run_ref, key, attempt_id, now)
        if status == "completed":
            return "Duplicate run skipped", 200
        if status == "in_progress":
            # A non-2xx response keeps retries going in case that attempt fails.
            return "Run in progress", 409

        try:
            self._job()
        except Exception:
            # Releases the claim so that a retry can process the run.
            finish_run(self._db.transaction(), run_ref, attempt_id, succeeded=False)
            raise
        finish_run(self._db.transaction(), run_ref, attempt_id, succeeded=True)
        return "Run processed", 200


def headers_as_dict(headers: Any) -> dict[str, str]:
    """Flask's headers to the plain mapping the handler reads (the lookup is case-insensitive)."""
    return {str(name): str(value) for name, value in headers.items()}
