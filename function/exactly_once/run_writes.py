"""`RunContext.writes`: Firestore writes a job stages, committed with its run's completion.

The completing write of a run is one conditional commit of its record; the staged writes
ride in that same commit (ledger.writes), so they are applied exactly when the run is
recorded completed by the attempt that staged them, and never otherwise: not when another
attempt took the run over meanwhile, not when Firestore failed the commit. An effect on the
ledger's database becomes exactly-once with the run, at no extra round trip.

Everything that would make the commit fail for a reason no retry can change is refused
here, when the job stages the write, before anything is written: more writes than the commit
has room for beside the ledger's own, a document of another database (the commit is the
ledger's, on its database), one of the ledger's own documents, a value the client library
cannot encode. What Firestore alone can tell (a create of a document that exists, an update
of one that does not) refuses the whole commit; the run is then recorded failed terminally
(delivery/finishing.py), none of its writes applied.

A failed attempt's writes are dropped with it: the retry runs the job again, which stages
them again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from google.cloud import firestore
from google.cloud.firestore_v1.base_document import BaseDocumentReference

from exactly_once.errors import TerminalJobError
from exactly_once.ledger.writes import (
    LEDGER_COMMIT_WRITES,
    MAX_COMMIT_WRITES,
    StagedWrite,
    WriteKind,
    add_to_batch,
)

# How many writes a run may stage: what one commit holds beside the ledger's own.
MAX_STAGED_WRITES = MAX_COMMIT_WRITES - LEDGER_COMMIT_WRITES
# Firestore refuses a request over 10 MiB and a document over 1 MiB. The run record's own
# write (a document, so 1 MiB at most) shares the commit: the staged writes may take the rest.
MAX_REQUEST_BYTES = 10 * 1024 * 1024
MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_STAGED_BYTES = MAX_REQUEST_BYTES - MAX_DOCUMENT_BYTES


@dataclass(frozen=True)
class WriteScope:
    """Where the ledger commits: `database` is "projects/<project>/databases/<database>",
    `runs_collection` the collection of its records (and locks), which no job may write."""

    database: str
    runs_collection: str

    @classmethod
    def of(cls, client: firestore.Client, runs_collection: str) -> WriteScope:
        return cls(str(client._database_string), runs_collection)


class RunWrites:
    """The writes one attempt stages, in order. `scope` is the ledger's (None: a context
    built by a test without a ledger, whose writes are never committed)."""

    def __init__(self, scope: WriteScope | None = None) -> None:
        self._scope = scope
        self._lock = threading.Lock()
        self._staged: list[StagedWrite] = []
        self._bytes = 0  # the staged writes' encoded size

    def create(self, document: BaseDocumentReference, data: Mapping[str, Any]) -> None:
        """Create `document` with the run's completion; the whole commit is refused (and the
        run fails terminally) if it exists by then."""
        self._stage(StagedWrite(WriteKind.CREATE, _sync(document), dict(data)))

    def set(self, document: BaseDocumentReference, data: Mapping[str, Any], *, merge: bool = False) -> None:
        """Overwrite `document` (or merge into it) with the run's completion."""
        self._stage(StagedWrite(WriteKind.SET, _sync(document), dict(data), merge=merge))

    def update(self, document: BaseDocumentReference, data: Mapping[str, Any]) -> None:
        """Update fields of `document` with the run's completion; the whole commit is refused
        (and the run fails terminally) if it does not exist by then."""
        if not data:
            raise TerminalJobError(f"context.writes.update of {_path(document)}: no fields to update")
        self._stage(StagedWrite(WriteKind.UPDATE, _sync(document), dict(data)))

    def delete(self, document: BaseDocumentReference) -> None:
        """Delete `document` with the run's completion (nothing happens if it is absent)."""
        self._stage(StagedWrite(WriteKind.DELETE, _sync(document)))

    def staged(self) -> tuple[StagedWrite, ...]:
        with self._lock:
            return tuple(self._staged)

    def __len__(self) -> int:
        with self._lock:
            return len(self._staged)

    def _stage(self, write: StagedWrite) -> None:
        self._check_document(write)
        size = _encoded_size(write)
        what = f"{write.kind.value} {_path(write.document)}"
        if size > MAX_DOCUMENT_BYTES:
            raise TerminalJobError(
                f"context.writes.{what}: {size} bytes encoded, more than the {MAX_DOCUMENT_BYTES} "
                "a Firestore document holds"
            )
        with self._lock:
            if len(self._staged) >= MAX_STAGED_WRITES:
                raise TerminalJobError(
                    f"context.writes holds at most {MAX_STAGED_WRITES} writes: a commit holds "
                    f"{MAX_COMMIT_WRITES}, {LEDGER_COMMIT_WRITES} of them the ledger's own; "
                    f"write {len(self._staged) + 1} ({what}) refused"
                )
            if self._bytes + size > MAX_STAGED_BYTES:
                raise TerminalJobError(
                    f"context.writes holds at most {MAX_STAGED_BYTES} bytes of writes (a commit holds "
                    f"{MAX_REQUEST_BYTES}, {MAX_DOCUMENT_BYTES} of them kept for the run record's); "
                    f"{self._bytes} are staged, and write {len(self._staged) + 1} ({what}) adds {size}"
                )
            self._staged.append(write)
            self._bytes += size

    def _check_document(self, write: StagedWrite) -> None:
        document = write.document
        if not isinstance(document, firestore.DocumentReference):
            raise TerminalJobError(
                f"context.writes.{write.kind.value}: expected a google.cloud.firestore DocumentReference, "
                f"got {type(document).__name__}"
            )
        if self._scope is None:
            return
        database, _, path = str(document._document_path).partition("/documents/")
        if database != self._scope.database:
            raise TerminalJobError(
                f"context.writes.{write.kind.value} of {path}: the document is in {database}, not in the "
                f"ledger's database {self._scope.database}; only writes there commit with the run"
            )
        if path.split("/", 1)[0] == self._scope.runs_collection:
            raise TerminalJobError(
                f"context.writes.{write.kind.value} of {path}: {self._scope.runs_collection} holds the "
                "ledger's own records, which only the ledger writes"
            )


def _encoded_size(write: StagedWrite) -> int:
    """The write's size on the wire, encoded as the commit will encode it, into a batch that
    is never sent: a value the client cannot encode is refused now, not after the job
    returned."""
    batch = write.document._client.batch()
    try:
        add_to_batch(batch, [write])
    except (TypeError, ValueError) as error:
        what = f"context.writes.{write.kind.value} of {_path(write.document)}"
        raise TerminalJobError(f"{what}: the client cannot encode it: {error}") from None
    return sum(int(pb._pb.ByteSize()) for pb in batch._write_pbs)


def _sync(document: BaseDocumentReference) -> firestore.DocumentReference:
    """The reference as the commit takes it. The client library types what
    `collection().document()` returns as its base class; anything but a synchronous
    client's reference is refused when staged (_check_document)."""
    return cast(firestore.DocumentReference, document)


def _path(document: Any) -> str:
    return str(getattr(document, "path", document))
