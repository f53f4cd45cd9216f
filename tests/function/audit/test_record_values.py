"""The audit decodes run records from Firestore's protobufs itself (audit/record_values.py), not
through `DocumentSnapshot.to_dict()`: on the emulator, every kind of value it decodes, written by
the client library, reads back as `to_dict()` gives it (value and type, nested ones too; a
timestamp as a UTC datetime where the library gives its DatetimeWithNanoseconds subclass, the
same instant), with the same commit times; a kind no run record holds is refused by the field's
name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud.firestore_v1.base_document import DocumentSnapshot

from exactly_once.audit.reads import AUDIT_FIELDS, projected
from exactly_once.audit.record_values import RecordValueError
from exactly_once.ledger import lifecycle
from exactly_once.ledger.downstream import (
    DOWNSTREAM_ERROR,
    DOWNSTREAM_KIND,
    DOWNSTREAM_NAME,
    DOWNSTREAM_STATE,
)
from exactly_once.ledger.records import in_progress_record
from exactly_once.ledger.store import COMMIT_TIME
from exactly_once.run_key import RunKey
from tests.support.audit_runs import ledger_reader

RUNS = "record-values"
KEY = RunKey("acme", "europe-west1", "nightly", datetime(2026, 10, 16, 12, tzinfo=UTC))
# Every kind the decoder knows, at its edges: a timestamp to the nanosecond, integers beyond
# 32 bits, an empty string, bytes, nested maps and arrays of mixed kinds.
EVERY_KIND: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "integer": -(2**53) - 7,
    "double": 0.1,
    "whole_double": 30.0,
    "string": "héllo",
    "empty_string": "",
    "bytes": b"\x00\xff",
    "timestamp": DatetimeWithNanoseconds(2026, 10, 16, 12, 0, 1, nanosecond=123456789, tzinfo=UTC),
    "map": {"inner": {"deep": 1, "when": datetime(2026, 1, 1, tzinfo=UTC)}, "none": None},
    "empty_map": {},
    "array": [1, "two", 3.5, None, {"four": [4]}],
    "empty_array": [],
}


def typed(value: Any) -> Any:
    """`value` with the type of every part of it, so 1 and 1.0, or "1" and 1, do not compare
    equal; a timestamp is a UTC datetime, whichever subclass."""
    if isinstance(value, dict):
        return {name: typed(inner) for name, inner in value.items()}
    if isinstance(value, list):
        return [typed(inner) for inner in value]
    if isinstance(value, datetime):
        assert value.utcoffset() == timedelta(0)
        return ("datetime", value)
    return (type(value).__name__, value)


def test_every_kind_reads_back_as_to_dict_gives_it_with_the_same_commit_times(db: firestore.Client) -> None:
    document = db.collection(RUNS).document("every-kind")
    document.set(EVERY_KIND)
    snapshot = cast(DocumentSnapshot, document.get())
    stored = ledger_reader(db, RUNS)  # the audit's own fields only: none of these
    whole = ledger_reader(db, RUNS, field_paths=None)

    (record,) = whole(["every-kind", "absent"]).values()
    assert typed(record.fields) == typed(snapshot.to_dict())
    # Firestore keeps a timestamp value to the microsecond.
    assert record.fields["timestamp"] == datetime(2026, 10, 16, 12, 0, 1, 123456, tzinfo=UTC)
    assert (record.update_time, record.create_time) == (snapshot.update_time, snapshot.create_time)
    assert record.read_time >= record.update_time
    assert stored(["every-kind"])["every-kind"].fields == {}


def test_a_run_records_audited_fields_read_back_as_to_dict_gives_them(db: firestore.Client) -> None:
    now = datetime.now(UTC)
    claimed = in_progress_record(
        KEY, "attempt-1", now, lease=timedelta(seconds=30), retention=timedelta(days=1), target="svc"
    )
    document = db.collection(RUNS).document(KEY.run_id)
    document.set(claimed)
    completed = lifecycle.completion_fields(
        lifecycle.JobResult.TERMINAL_FAILURE,
        error="boom",
        output_json='{"rows": 3}',
        expire_at=now + timedelta(days=1),
        commit_time=COMMIT_TIME,
    )
    started = {
        DOWNSTREAM_KIND: "cloud_run_job",
        DOWNSTREAM_NAME: "executions/e-1",
        DOWNSTREAM_STATE: "failed",
    }
    document.update({**completed, **started, DOWNSTREAM_ERROR: None})
    snapshot = cast(DocumentSnapshot, document.get())
    record = ledger_reader(db, RUNS)([KEY.run_id])[KEY.run_id]
    # Every field the audit reads is on the record: a string, a null, a double, a timestamp.
    assert set(record.fields) == set(AUDIT_FIELDS)
    assert typed(record.fields) == typed(projected(snapshot.to_dict() or {}, AUDIT_FIELDS))
    # Written twice: its creation and its last update are two commit times, both kept.
    assert record.create_time == snapshot.create_time < record.update_time == snapshot.update_time


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (firestore.GeoPoint(52.5, 13.4), "geo_point_value"),
        ("reference", "reference_value"),
    ],
)
def test_a_kind_no_run_record_holds_is_refused_by_the_fields_name(
    db: firestore.Client, value: Any, kind: str
) -> None:
    written = db.document(f"{RUNS}/other") if value == "reference" else value
    db.collection(RUNS).document(kind).set({"status": "completed", "about": {"odd": [written]}})
    with pytest.raises(RecordValueError, match=rf"field 'about\.odd\[0\]' holds a {kind}"):
        ledger_reader(db, RUNS, field_paths=None)([kind])
