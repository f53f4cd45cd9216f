"""Read-only access to run records by id, for the missed-run audit (job and CLI).

Run ids are computed from the schedule, so the audit reads documents by id in batched gets:
no query, no index, one round trip per page of ids. Each record comes with its commit and
read times, so the audit judges leases on Firestore's clock exactly as a claim would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from google.cloud import firestore

from exactly_once.audit.missed_runs import RecordReader
from exactly_once.ledger.lifecycle import StoredRecord

# A batched get of a few hundred small documents takes well under a second; anything near
# this is Firestore being unreachable, and the caller should fail rather than hang.
READ_TIMEOUT_SECONDS = 30.0
# Ids per batched get: an hour of a thousand jobs is many thousands of runs, read in pages.
PAGE_SIZE = 500


def firestore_reader(
    client: firestore.Client, collection: str, *, timeout: float = READ_TIMEOUT_SECONDS
) -> RecordReader:
    """A RecordReader on `collection` of `client`'s database."""

    def read(run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
        found: dict[str, StoredRecord] = {}
        unique = list(dict.fromkeys(run_ids))
        for start in range(0, len(unique), PAGE_SIZE):
            references = [
                client.collection(collection).document(run_id) for run_id in unique[start : start + PAGE_SIZE]
            ]
            for snapshot in client.get_all(references, timeout=timeout):
                if snapshot.exists:
                    found[snapshot.id] = StoredRecord(
                        fields=snapshot.to_dict() or {},
                        update_time=snapshot.update_time,
                        read_time=snapshot.read_time,
                        create_time=snapshot.create_time,
                    )
        return found

    return read
