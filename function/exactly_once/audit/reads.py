"""Read-only access to run records by id, for the missed-run audit (job and CLI).

Run ids are computed from the schedule, so the audit reads documents by id in batched gets:
no query, no index, one round trip per call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.cloud import firestore

from exactly_once.audit.missed_runs import RecordReader

# A batched get of a few hundred small documents takes well under a second; anything near
# this is Firestore being unreachable, and the caller should fail rather than hang.
READ_TIMEOUT_SECONDS = 30.0


def firestore_reader(
    client: firestore.Client, collection: str, *, timeout: float = READ_TIMEOUT_SECONDS
) -> RecordReader:
    """A RecordReader on `collection` of `client`'s database."""

    def read(run_ids: Sequence[str]) -> Mapping[str, Mapping[str, Any]]:
        references = [client.collection(collection).document(run_id) for run_id in run_ids]
        snapshots = client.get_all(references, timeout=timeout)
        return {snapshot.id: snapshot.to_dict() or {} for snapshot in snapshots if snapshot.exists}

    return read
