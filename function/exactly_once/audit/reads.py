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

The reads go through Firestore's generated (GAPIC) client, and each record is decoded from its
protobuf (audit/record_values.py): the client library's `get_all` builds a reference per id
and a snapshot per record, decodes through proto-plus and deep-copies each record again in
`to_dict()`, which cost an hour of a thousand every-minute jobs most of its CPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import grpc
from google.auth.credentials import Credentials
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports.grpc import FirestoreGrpcTransport
from google.cloud.firestore_v1.types import BatchGetDocumentsRequest, BatchGetDocumentsResponse, DocumentMask

from exactly_once.audit.missed_runs import RecordReader
from exactly_once.audit.record_values import Timestamps, decoded_fields
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
# Where the client libraries find the emulator (`host:port`) when one stands in for Firestore.
EMULATOR_HOST_ENV: Final = "FIRESTORE_EMULATOR_HOST"
# A batched get is one request answered by a stream of one message per document. By default
# gRPC hands each message from its polling thread to the reading thread (a lock and a wake-up
# per document: as much CPU as decoding it); with this, the reading thread receives them itself.
# The channel serves the audit's reads alone, so nothing else is affected.
CHANNEL_OPTIONS: Final = ((grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),)


def projected(fields: Mapping[str, Any], field_paths: Sequence[str] | None) -> dict[str, Any]:
    """`fields` as a read projected to `field_paths` returns them (None: whole). A reader in
    memory applies it too, so a test judges from exactly what the audit reads in the cloud."""
    if field_paths is None:
        return dict(fields)
    return {name: fields[name] for name in field_paths if name in fields}


def firestore_api(credentials: Credentials | None = None) -> FirestoreClient:
    """Firestore's generated client on a channel of its own (CHANNEL_OPTIONS), where
    `firestore.Client` would go: the emulator that EMULATOR_HOST_ENV names (plain gRPC, no
    credentials: the emulator asks for none), else Firestore with `credentials` (None: the
    environment's default ones)."""
    host = os.environ.get(EMULATOR_HOST_ENV, "").strip()
    if host:
        channel = grpc.insecure_channel(host, options=CHANNEL_OPTIONS)
        return FirestoreClient(transport=FirestoreGrpcTransport(channel=channel))
    return FirestoreClient(transport=FirestoreGrpcTransport(credentials=credentials, channel=_secure_channel))


def _secure_channel(host: str, *, options: Sequence[tuple[str, Any]] = (), **settings: Any) -> grpc.Channel:
    """The channel the transport would build itself (credentials, scopes, TLS), with ours."""
    channel: grpc.Channel = FirestoreGrpcTransport.create_channel(
        host, options=[*options, *CHANNEL_OPTIONS], **settings
    )
    return channel


def database_name(project: str, database: str) -> str:
    """The resource name Firestore's API knows a database by."""
    return f"projects/{project}/databases/{database}"


def firestore_reader(
    api: FirestoreClient,
    database: str,
    collection: str,
    *,
    timeout: float = READ_TIMEOUT_SECONDS,
    field_paths: Sequence[str] | None = AUDIT_FIELDS,
) -> RecordReader:
    """A RecordReader on `collection` of `database` (its resource name, database_name), reading
    `field_paths` of each record (None: every field)."""
    documents = f"{database}/documents/{collection}/"
    mask = DocumentMask.pb(DocumentMask(field_paths=list(field_paths))) if field_paths is not None else None

    def read(run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
        found: dict[str, StoredRecord] = {}
        unique = list(dict.fromkeys(run_ids))
        read_times, commit_times = Timestamps(), Timestamps()
        for start in range(0, len(unique), PAGE_SIZE):
            # Built as a protobuf and wrapped, not converted id by id through proto-plus.
            request = BatchGetDocumentsRequest.pb()(
                database=database,
                documents=[documents + run_id for run_id in unique[start : start + PAGE_SIZE]],
                mask=mask,
            )
            responses = api.batch_get_documents(
                request=BatchGetDocumentsRequest.wrap(request), timeout=timeout
            )
            for response in responses:
                # The protobuf under the proto-plus wrapper: read directly, no wrapper per field.
                raw = BatchGetDocumentsResponse.pb(response)
                if raw.HasField("found"):
                    document = raw.found
                    found[document.name.rpartition("/")[2]] = StoredRecord(
                        fields=decoded_fields(document.fields),
                        update_time=commit_times.of(document.update_time),
                        read_time=read_times.of(raw.read_time),
                        create_time=commit_times.of(document.create_time),
                    )
        return found

    return read
