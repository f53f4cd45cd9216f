"""Read-only access to run records by id, for the missed-run audit (job and CLI).

Run ids are computed from the schedule, so the audit reads documents by id in batched gets:
no query, no index, one round trip per page of ids, whichever jobs the ids belong to (the
audit hands over all of its span's ids at once, so an hour of a thousand every-minute jobs is
120 full pages, not a thousand part-filled ones). Each record comes with its commit and read
times, so the audit judges leases on Firestore's clock exactly as a claim would.

The audit reads only the fields its verdict and its lines use (`AUDIT_FIELDS`): a completed
record also holds its output, body hash, times and job status's copy, which the audit would pay
to transfer and decode on every run of every job. A reader that shows records whole (`ops
status`) asks for every field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from google.cloud import firestore

from exactly_once.audit.missed_runs import RecordReader
from exactly_once.ledger.downstream import (
    DOWNSTREAM_ERROR,
    DOWNSTREAM_KIND,
    DOWNSTREAM_NAME,
    DOWNSTREAM_STATE,
)
from exactly_once.ledger.lifecycle import JUDGED_FIELDS, StoredRecord

# A batched get of a few hundred small documents takes well under a second; anything near
# this is Firestore being unreachable, and the caller should fail rather than hang.
READ_TIMEOUT_SECONDS = 30.0
# Ids per batched get: an hour of a thousand jobs is many thousands of runs, read in pages.
PAGE_SIZE = 500
# What the audit reads of a record: the lifecycle's verdict, and the downstream work's state
# (a completed run whose work failed is judged `downstream failed`).
AUDIT_FIELDS: Final = (*JUDGED_FIELDS, DOWNSTREAM_KIND, DOWNSTREAM_NAME, DOWNSTREAM_STATE, DOWNSTREAM_ERROR)


def projected(fields: Mapping[str, Any], field_paths: Sequence[str] | None) -> dict[str, Any]:
    """`fields` as a read projected to `field_paths` returns them (None: whole). A reader in
    memory applies it too, so a test judges from exactly what the audit reads in the cloud."""
    if field_paths is None:
        return dict(fields)
    return {name: fields[name] for name in field_paths if name in fields}


def firestore_reader(
    client: firestore.Client,
    collection: str,
    *,
    timeout: float = READ_TIMEOUT_SECONDS,
    field_paths: Sequence[str] | None = AUDIT_FIELDS,
) -> RecordReader:
    """A RecordReader on `collection` of `client`'s database, reading `field_paths` of each
    record (None: every field)."""
    paths = list(field_paths) if field_paths is not None else None

    def read(run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
        found: dict[str, StoredRecord] = {}
        unique = list(dict.fromkeys(run_ids))
        for start in range(0, len(unique), PAGE_SIZE):
            references = [
                client.collection(collection).document(run_id) for run_id in unique[start : start + PAGE_SIZE]
            ]
            for snapshot in client.get_all(references, field_paths=paths, timeout=timeout):
                if snapshot.exists:
                    found[snapshot.id] = StoredRecord(
                        fields=snapshot.to_dict() or {},
                        update_time=snapshot.update_time,
                        read_time=snapshot.read_time,
                        create_time=snapshot.create_time,
                    )
        return found

    return read
