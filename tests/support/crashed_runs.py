"""A run left behind by a crashed attempt, and a second run of the same job: what the takeover
tests start from."""

from __future__ import annotations

from datetime import timedelta

from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER, run_key_from_headers
from exactly_once.ledger.lifecycle import lease_seconds_left
from exactly_once.ledger.records import in_progress_record, utc_now
from exactly_once.ledger.store import FirestoreRunStore
from tests.support.demo_runs import HEADERS
from tests.support.waiting import wait_until

# The demo job's next run, 15 minutes after the one HEADERS names.
OTHER_RUN = {**HEADERS, SCHEDULE_TIME_HEADER: "2026-10-16T12:15:00Z"}


def crashed_run(db) -> None:
    """The run claimed by an attempt that crashed: its record left in progress, lease over."""
    key = run_key_from_headers(HEADERS)
    lease = timedelta(seconds=1)
    record = in_progress_record(key, "crashed", utc_now(), lease=lease, retention=timedelta(days=1))
    db.collection("scheduler_runs").document(key.run_id).set(record)
    store = FirestoreRunStore(db, "scheduler_runs")

    def expired() -> bool:
        stored = store.get(key.run_id, timeout=30)
        return stored is not None and lease_seconds_left(stored, lease) <= 0

    wait_until(expired, timeout=30, what="the crashed attempt's lease to end")
