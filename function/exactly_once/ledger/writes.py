"""Writes to other documents that ride in one of the ledger's own commits.

A run's completing (or releasing) write is one conditional write of its record. Firestore
commits a batch of writes atomically, so other documents' writes sent in the same batch are
applied exactly when the record's write is: all of them if the precondition holds, none if
another attempt changed the record first. That is how an effect on this database becomes
exactly-once with the run instead of at-least-once beside it, at no extra round trip.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from google.cloud import firestore

# The writes one commit may hold, the ledger's own included. Firestore documents this limit
# for a batch; a larger batch is refused whole, after the job has run.
MAX_COMMIT_WRITES = 500
# The ledger's own writes in a run's completing commit (the run record's, and the merge of the
# job's status document, ledger/job_status.py): what a job's staged writes leave room for is
# MAX_COMMIT_WRITES minus these. The one place to raise when the ledger adds a write of its own
# to that commit. (Both fit in the bytes a commit keeps back for the record: a status holds
# at most one output and one reason, as the record does.)
LEDGER_COMMIT_WRITES = 2


class WriteKind(enum.StrEnum):
    """The four writes a batch can carry, named as the client library names them."""

    CREATE = "create"
    SET = "set"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True)
class StagedWrite:
    """One write, held until the commit that carries it. `data` may hold the client's
    sentinels (Increment, SERVER_TIMESTAMP, DELETE_FIELD); `merge` applies to SET only.
    `if_updated_at` conditions an UPDATE or DELETE on the document as read: the whole commit is
    refused when it changed since (a decision made on that read no longer stands)."""

    kind: WriteKind
    document: firestore.DocumentReference
    data: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    merge: bool = False
    if_updated_at: datetime | None = None

    @property
    def option(self) -> Any:
        """The client library's precondition for `if_updated_at` (None: unconditioned)."""
        if self.if_updated_at is None:
            return None
        return firestore.Client.write_option(last_update_time=self.if_updated_at)


def add_to_batch(batch: firestore.WriteBatch, writes: Sequence[StagedWrite]) -> None:
    """Append `writes` to `batch`, in order."""
    for write in writes:
        if write.kind is WriteKind.CREATE:
            batch.create(write.document, dict(write.data))
        elif write.kind is WriteKind.SET:
            batch.set(write.document, dict(write.data), merge=write.merge)
        elif write.kind is WriteKind.UPDATE:
            batch.update(write.document, dict(write.data), option=write.option)
        else:
            batch.delete(write.document, option=write.option)
