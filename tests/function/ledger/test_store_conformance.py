"""One set of tests, two stores: FirestoreRunStore on the emulator and MemoryRunStore
(function/exactly_once/testing/memory_store.py). The memory store stands in for Firestore in tests that need
time and faults under their control, so it must keep every promise the ledger relies on, and
these tests hold it to what the emulator does. A test that fails for the memory store only is
a bug in the memory store. Then the memory store's own tools: its clock and scripted faults.

No test waits: the emulator's commit times move on their own, the memory store's on its clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from google.api_core import exceptions as google_exceptions
from google.cloud import firestore

from exactly_once.audit.missed_runs import RecordReader
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import ClaimKind, RunLedger
from exactly_once.ledger.store import (
    FIRST_RETRY_PAUSE_SECONDS,
    FirestoreRunStore,
    RecordExists,
    RunStore,
    StaleWrite,
    StoredRecord,
)
from exactly_once.ledger.writes import StagedWrite, WriteKind, add_to_batch
from exactly_once.testing.memory_store import (
    LOST_ANSWER,
    NO_ANSWER,
    SLOW,
    UNAVAILABLE,
    MemoryRunStore,
    Operation,
    ServerClock,
    offline_client,
    stored_record_reader,
)
from tests.support.audit_runs import ledger_reader
from tests.support.clock import FakeClock
from tests.support.ledger_runs import KEY, LEASE, RETENTION

RUNS = "scheduler_runs"
RUN = "run-1"
TIMEOUT = 10.0


@dataclass(frozen=True)
class Backend:
    """A store and what a test needs beside it: a client to name other documents, any
    document read by path with its times, another client's batch commit, the audit's reader."""

    name: str
    store: RunStore
    client: firestore.Client
    snapshot: Callable[[str], StoredRecord | None]
    commit: Callable[[Sequence[StagedWrite]], object]
    reader: RecordReader

    def doc(self, path: str) -> firestore.DocumentReference:
        return self.client.document(path)

    def fields(self, path: str) -> dict[str, Any] | None:
        snapshot = self.snapshot(path)
        return None if snapshot is None else dict(snapshot.fields)

    def record(self) -> StoredRecord | None:
        return self.store.get(RUN, timeout=TIMEOUT)


def _firestore_backend(db: firestore.Client) -> Backend:
    def snapshot(path: str) -> StoredRecord | None:
        got = db.document(path).get()
        if not got.exists:
            return None
        return StoredRecord(got.to_dict() or {}, got.update_time, got.read_time, got.create_time)

    def commit(writes: Sequence[StagedWrite]) -> object:
        batch = db.batch()
        add_to_batch(batch, writes)
        return batch.commit()

    store = FirestoreRunStore(db, RUNS)
    return Backend("firestore", store, db, snapshot, commit, ledger_reader(db, RUNS))


def _memory_backend() -> Backend:
    store = MemoryRunStore(RUNS)
    return Backend(
        "memory", store, offline_client(), store.snapshot, store.commit, stored_record_reader(store)
    )


@pytest.fixture(params=["firestore", "memory"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "firestore":
        return _firestore_backend(request.getfixturevalue("db"))
    return _memory_backend()


class Rider:
    """Other documents' writes riding in updates of one record, as the ledger sends them."""

    def __init__(self, backend: Backend) -> None:
        self.store = backend.store
        self.rounds = 0
        self.update_time = self.store.create(RUN, {"round": 0}, timeout=TIMEOUT)

    def ride(self, *writes: StagedWrite) -> datetime:
        self.rounds += 1
        self.update_time = self.store.update(
            RUN, {"round": self.rounds}, if_updated_at=self.update_time, timeout=TIMEOUT, also=writes
        )
        return self.update_time


def _to_millisecond(moment: datetime) -> datetime:
    return datetime(*moment.utctimetuple()[:6], moment.microsecond // 1000 * 1000, tzinfo=UTC)


# -- create and get -------------------------------------------------------------------------


def test_create_returns_the_commit_time_that_get_then_reports(backend: Backend) -> None:
    created = backend.store.create(
        RUN, {"status": "in_progress", "n": 1, "m": {"k": [1, "a"]}}, timeout=TIMEOUT
    )
    record = backend.record()
    assert record is not None
    assert record.fields == {"status": "in_progress", "n": 1, "m": {"k": [1, "a"]}}
    assert record.update_time == created == record.create_time
    assert record.read_time >= record.update_time
    assert created.tzinfo is not None and created.utcoffset() == timedelta(0)


def test_get_of_a_missing_record_is_none(backend: Backend) -> None:
    assert backend.store.get("nobody", timeout=TIMEOUT) is None


def test_create_of_an_existing_record_is_refused_and_changes_nothing(backend: Backend) -> None:
    created = backend.store.create(RUN, {"n": 1}, timeout=TIMEOUT)
    with pytest.raises(RecordExists) as exists:
        backend.store.create(RUN, {"n": 2}, timeout=TIMEOUT)
    assert not exists.value.unheard
    record = backend.record()
    assert record is not None and (record.fields, record.update_time) == ({"n": 1}, created)


def test_values_come_back_as_firestore_stores_them(backend: Backend) -> None:
    naive = datetime(2026, 1, 2, 3, 4, 5, 678901)
    elsewhere = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    fields = {
        "tuple": (1, 2),
        "naive": naive,
        "elsewhere": elsewhere,
        "int": 1,
        "float": 1.0,
        "none": None,
        "empty": {},
        "bytes": b"\x00",
        "flag": True,
    }
    backend.store.create(RUN, fields, timeout=TIMEOUT)
    record = backend.record()
    assert record is not None
    got = record.fields
    assert got["tuple"] == [1, 2]
    assert got["naive"] == naive.replace(tzinfo=UTC) and got["naive"].tzinfo is not None
    assert got["elsewhere"] == elsewhere and got["elsewhere"].utcoffset() == timedelta(0)
    assert type(got["int"]) is int and type(got["float"]) is float and got["flag"] is True
    assert (got["none"], got["empty"], got["bytes"]) == (None, {}, b"\x00")


# -- update ---------------------------------------------------------------------------------


def test_update_replaces_the_named_fields_and_keeps_the_others(backend: Backend) -> None:
    created = backend.store.create(
        RUN, {"a": 1, "m": {"x": 1, "y": 2}, "keep": "k", "drop": 0}, timeout=TIMEOUT
    )
    updated = backend.store.update(
        RUN, {"a": 2, "m": {"z": 3}, "drop": firestore.DELETE_FIELD}, if_updated_at=created, timeout=TIMEOUT
    )
    record = backend.record()
    assert record is not None
    assert record.fields == {"a": 2, "m": {"z": 3}, "keep": "k"}  # a map given is replaced whole
    assert updated > created
    assert (record.update_time, record.create_time) == (updated, created)
    assert record.read_time >= updated


def test_update_takes_dotted_keys_as_paths_into_maps(backend: Backend) -> None:
    created = backend.store.create(RUN, {"m": {"x": 1}, "s": 5}, timeout=TIMEOUT)
    backend.store.update(RUN, {"m.y": 2, "new.deep": 3, "s.t": 4}, if_updated_at=created, timeout=TIMEOUT)
    assert backend.fields(f"{RUNS}/{RUN}") == {"m": {"x": 1, "y": 2}, "new": {"deep": 3}, "s": {"t": 4}}


def test_a_write_that_changes_nothing_keeps_the_update_time(backend: Backend) -> None:
    created = backend.store.create(RUN, {"a": 1, "m": {"x": 1}}, timeout=TIMEOUT)
    again = backend.store.update(RUN, {"a": 1, "m.x": 1}, if_updated_at=created, timeout=TIMEOUT)
    assert again == created
    record = backend.record()
    assert record is not None and record.update_time == created
    changed = backend.store.update(RUN, {"a": 1.0}, if_updated_at=created, timeout=TIMEOUT)  # int -> double
    assert changed > created


def test_commit_times_increase_strictly_and_are_what_get_reports(backend: Backend) -> None:
    times = [backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)]
    for n in range(1, 4):
        times.append(backend.store.update(RUN, {"n": n}, if_updated_at=times[-1], timeout=TIMEOUT))
        record = backend.record()
        assert record is not None and record.update_time == times[-1] and record.create_time == times[0]
    assert times == sorted(set(times))


def test_update_conditioned_on_a_stale_time_is_refused(backend: Backend) -> None:
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    updated = backend.store.update(RUN, {"n": 1}, if_updated_at=created, timeout=TIMEOUT)
    with pytest.raises(StaleWrite) as stale:
        backend.store.update(RUN, {"n": 2}, if_updated_at=created, timeout=TIMEOUT)
    assert (stale.value.unheard, stale.value.refusal) == (False, None)
    record = backend.record()
    assert record is not None and (record.fields, record.update_time) == ({"n": 1}, updated)


def test_update_of_a_missing_record_is_refused(backend: Backend) -> None:
    created = backend.store.create("other", {"n": 0}, timeout=TIMEOUT)
    with pytest.raises(StaleWrite):
        backend.store.update(RUN, {"n": 1}, if_updated_at=created, timeout=TIMEOUT)
    assert backend.record() is None


def test_a_value_nested_too_deep_is_refused(backend: Backend) -> None:
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    deep: Any = 1
    for _ in range(21):
        deep = {"k": deep}
    with pytest.raises(google_exceptions.InvalidArgument):
        backend.store.update(RUN, {"deep": deep}, if_updated_at=created, timeout=TIMEOUT)
    backend.store.update(RUN, {"deep": deep["k"]}, if_updated_at=created, timeout=TIMEOUT)  # 20 deep


# -- delete ---------------------------------------------------------------------------------


def test_delete_conditioned_on_the_current_time_removes_the_record(backend: Backend) -> None:
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    backend.store.delete(RUN, if_updated_at=created, timeout=TIMEOUT)
    assert backend.record() is None


def test_delete_conditioned_on_a_stale_time_is_refused(backend: Backend) -> None:
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    updated = backend.store.update(RUN, {"n": 1}, if_updated_at=created, timeout=TIMEOUT)
    with pytest.raises(StaleWrite) as stale:
        backend.store.delete(RUN, if_updated_at=created, timeout=TIMEOUT)
    assert (stale.value.unheard, stale.value.refusal) == (False, None)
    record = backend.record()
    assert record is not None and record.update_time == updated


def test_a_conditional_delete_of_a_missing_record_is_refused(backend: Backend) -> None:
    """Firestore answers FAILED_PRECONDITION (stored version 0): never a silent success."""
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    backend.store.delete(RUN, if_updated_at=created, timeout=TIMEOUT)
    with pytest.raises(StaleWrite) as stale:
        backend.store.delete(RUN, if_updated_at=created, timeout=TIMEOUT)
    assert (stale.value.unheard, stale.value.refusal) == (False, None)


def test_a_record_created_again_after_a_delete_is_new(backend: Backend) -> None:
    first = backend.store.create(RUN, {"n": 0, "old": True}, timeout=TIMEOUT)
    backend.store.delete(RUN, if_updated_at=first, timeout=TIMEOUT)
    second = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    assert second > first
    record = backend.record()
    assert record is not None
    assert (record.fields, record.create_time, record.update_time) == ({"n": 0}, second, second)
    with pytest.raises(StaleWrite):
        backend.store.update(RUN, {"n": 1}, if_updated_at=first, timeout=TIMEOUT)


def test_of_writes_racing_from_one_state_exactly_one_wins(backend: Backend) -> None:
    """Compare-and-swap, the ledger's whole footing: of creates racing for one record, and of
    updates conditioned on one update_time, one commits and every other is refused."""
    racers = 6

    def race(write: Callable[[int], object]) -> list[object]:
        barrier = threading.Barrier(racers)

        def run(n: int) -> object:
            barrier.wait()
            try:
                return write(n)
            except (RecordExists, StaleWrite) as refused:
                return refused

        with ThreadPoolExecutor(racers) as pool:
            return list(pool.map(run, range(racers)))

    created = race(lambda n: backend.store.create(RUN, {"by": n}, timeout=TIMEOUT))
    winners = [outcome for outcome in created if isinstance(outcome, datetime)]
    assert len(winners) == 1 and all(isinstance(o, RecordExists) for o in created if o not in winners)
    # Each update changes the record: a write that changes nothing keeps the update_time, so
    # it would not stop the next one conditioned on the same time.
    updated = race(
        lambda n: backend.store.update(RUN, {"by": f"update {n}"}, if_updated_at=winners[0], timeout=TIMEOUT)
    )
    won = [(n, outcome) for n, outcome in enumerate(updated) if isinstance(outcome, datetime)]
    assert len(won) == 1 and sum(isinstance(o, StaleWrite) for o in updated) == racers - 1
    record = backend.record()
    assert record is not None and (record.fields, record.update_time) == (
        {"by": f"update {won[0][0]}"},
        won[0][1],
    )


# -- server timestamps ----------------------------------------------------------------------


def test_a_server_timestamp_is_the_request_time_to_the_millisecond(backend: Backend) -> None:
    """Not the commit time: Firestore takes the time it received the request, in
    milliseconds, so it is at most the write's commit time and at least the previous one's
    cut to the millisecond; every server timestamp of one commit is the same."""
    before = backend.store.create("earlier", {"n": 0}, timeout=TIMEOUT)
    created = backend.store.create(
        RUN, {"at": firestore.SERVER_TIMESTAMP, "m": {"at": firestore.SERVER_TIMESTAMP}}, timeout=TIMEOUT
    )
    record = backend.record()
    assert record is not None
    at = record.fields["at"]
    assert isinstance(at, datetime) and at.utcoffset() == timedelta(0)
    assert record.fields["m"]["at"] == at
    assert at.microsecond % 1000 == 0
    assert _to_millisecond(before) <= at <= created

    other = backend.doc("reports/stamped")
    committed = backend.store.update(
        RUN,
        {"at": firestore.SERVER_TIMESTAMP},
        if_updated_at=created,
        timeout=TIMEOUT,
        also=[StagedWrite(WriteKind.SET, other, {"at": firestore.SERVER_TIMESTAMP})],
    )
    record = backend.record()
    assert record is not None
    assert backend.fields(other.path) == {"at": record.fields["at"]}
    assert _to_millisecond(created) <= record.fields["at"] <= committed


# -- other documents' writes in the record's commit -----------------------------------------


def test_other_writes_are_applied_with_the_update(backend: Backend) -> None:
    counter, merged, replaced, doomed = (
        backend.doc(f"others/{name}") for name in ("counter", "merged", "replaced", "doomed")
    )
    backend.commit(
        [
            StagedWrite(WriteKind.SET, counter, {"n": 1}),
            StagedWrite(WriteKind.SET, merged, {"a": {"b": 1}, "keep": True}),
            StagedWrite(WriteKind.SET, replaced, {"old": 1}),
            StagedWrite(WriteKind.SET, doomed, {"x": 1}),
        ]
    )
    rider = Rider(backend)
    created = backend.doc("others/created")
    committed = rider.ride(
        StagedWrite(WriteKind.CREATE, created, {"rows": 3}),
        StagedWrite(WriteKind.UPDATE, counter, {"n": firestore.Increment(1)}),
        StagedWrite(WriteKind.SET, merged, {"a": {"c": 2}}, merge=True),
        StagedWrite(WriteKind.SET, replaced, {"new": 2}),
        StagedWrite(WriteKind.DELETE, doomed),
        StagedWrite(WriteKind.DELETE, backend.doc("others/never-there")),
    )
    assert backend.fields(created.path) == {"rows": 3}
    assert backend.fields(counter.path) == {"n": 2}
    assert backend.fields(merged.path) == {"a": {"b": 1, "c": 2}, "keep": True}
    assert backend.fields(replaced.path) == {"new": 2}
    assert backend.snapshot(doomed.path) is None
    for document in (created, counter, merged, replaced):
        snapshot = backend.snapshot(document.path)
        assert snapshot is not None and snapshot.update_time == committed
    created_snapshot = backend.snapshot(created.path)
    assert created_snapshot is not None and created_snapshot.create_time == committed


def test_other_writes_are_applied_with_the_delete(backend: Backend) -> None:
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    status = backend.doc("statuses/job")
    backend.store.delete(
        RUN,
        if_updated_at=created,
        timeout=TIMEOUT,
        also=[StagedWrite(WriteKind.SET, status, {"failures": firestore.Increment(1)}, merge=True)],
    )
    assert backend.record() is None
    assert backend.fields(status.path) == {"failures": 1}


@pytest.mark.parametrize("operation", ["update", "delete"])
def test_no_other_write_is_applied_when_the_records_precondition_fails(
    backend: Backend, operation: str
) -> None:
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    updated = backend.store.update(RUN, {"n": 1}, if_updated_at=created, timeout=TIMEOUT)
    report = backend.doc("reports/stale")
    also = [StagedWrite(WriteKind.SET, report, {"by": "stale"})]
    with pytest.raises(StaleWrite) as stale:
        if operation == "update":
            backend.store.update(RUN, {"n": 2}, if_updated_at=created, timeout=TIMEOUT, also=also)
        else:
            backend.store.delete(RUN, if_updated_at=created, timeout=TIMEOUT, also=also)
    # A commit that carried other writes says why it was refused: here the precondition.
    assert stale.value.refusal is not None and stale.value.refusal.startswith("400 ")
    assert not stale.value.unheard
    assert backend.snapshot(report.path) is None
    record = backend.record()
    assert record is not None and (record.fields, record.update_time) == ({"n": 1}, updated)


@pytest.mark.parametrize("operation", ["update", "delete"])
@pytest.mark.parametrize(
    ("kind", "target", "code"),
    [(WriteKind.CREATE, "others/existing", "409 "), (WriteKind.UPDATE, "others/missing", "404 ")],
)
def test_a_refused_other_write_refuses_the_whole_commit(
    backend: Backend, operation: str, kind: WriteKind, target: str, code: str
) -> None:
    backend.commit([StagedWrite(WriteKind.SET, backend.doc("others/existing"), {"v": 1})])
    created = backend.store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    applied_first = backend.doc("others/first")
    also = [
        StagedWrite(WriteKind.SET, applied_first, {"v": 2}),
        StagedWrite(kind, backend.doc(target), {"v": 2}),
    ]
    with pytest.raises(StaleWrite) as refused:
        if operation == "update":
            backend.store.update(RUN, {"n": 1}, if_updated_at=created, timeout=TIMEOUT, also=also)
        else:
            backend.store.delete(RUN, if_updated_at=created, timeout=TIMEOUT, also=also)
    refusal = refused.value.refusal
    assert refusal is not None and refusal.startswith(code), refusal
    if kind is WriteKind.CREATE:
        assert target in refusal  # Firestore names the document that exists
    record = backend.record()
    assert record is not None and (record.fields, record.update_time) == ({"n": 0}, created)
    assert backend.snapshot(applied_first.path) is None
    assert backend.fields("others/existing") == {"v": 1}
    assert backend.snapshot("others/missing") is None


def test_an_other_write_nested_too_deep_refuses_the_commit(backend: Backend) -> None:
    rider = Rider(backend)
    deep: Any = 1
    for _ in range(21):
        deep = {"k": deep}
    with pytest.raises(StaleWrite) as refused:
        rider.ride(StagedWrite(WriteKind.SET, backend.doc("others/deep"), {"deep": deep}))
    assert refused.value.refusal is not None and refused.value.refusal.startswith("400 ")
    assert backend.snapshot("others/deep") is None


def test_writes_of_one_commit_apply_in_order(backend: Backend) -> None:
    rider = Rider(backend)
    made = backend.doc("others/made")
    record_doc = backend.doc(f"{RUNS}/{RUN}")
    committed = rider.ride(
        StagedWrite(WriteKind.CREATE, made, {"a": 1}),
        StagedWrite(WriteKind.UPDATE, made, {"b": 2}),
        StagedWrite(WriteKind.SET, record_doc, {"extra": True}, merge=True),
    )
    assert backend.fields(made.path) == {"a": 1, "b": 2}
    record = backend.record()
    assert record is not None and record.fields == {"round": 1, "extra": True}
    assert record.update_time == committed
    # Deleted, then created again in one commit: a new document.
    remade = rider.ride(StagedWrite(WriteKind.DELETE, made), StagedWrite(WriteKind.CREATE, made, {"c": 3}))
    snapshot = backend.snapshot(made.path)
    assert snapshot is not None and (snapshot.fields, snapshot.create_time) == ({"c": 3}, remade)


def test_a_merge_merges_maps_at_every_depth(backend: Backend) -> None:
    rider = Rider(backend)
    doc = backend.doc("statuses/merged")
    rider.ride(StagedWrite(WriteKind.SET, doc, {"a": {"b": 1, "c": {"d": 1, "e": 2}}, "f": 1, "l": [1, 2]}))

    def merge(data: dict[str, Any]) -> dict[str, Any] | None:
        rider.ride(StagedWrite(WriteKind.SET, doc, data, merge=True))
        return backend.fields(doc.path)

    assert merge({"a": {"c": {"d": 9}, "g": 3}, "l": [3], "h": {}}) == {
        "a": {"b": 1, "c": {"d": 9, "e": 2}, "g": 3},
        "f": 1,
        "l": [3],  # arrays are replaced, not merged
        "h": {},
    }
    assert merge({"a": {"c": {}}}) == {"a": {"b": 1, "c": {}, "g": 3}, "f": 1, "l": [3], "h": {}}
    assert merge({"a": 5}) == {"a": 5, "f": 1, "l": [3], "h": {}}
    assert merge({"a": {"z": 1}}) == {"a": {"z": 1}, "f": 1, "l": [3], "h": {}}
    assert merge(
        {"a": firestore.DELETE_FIELD, "absent": firestore.DELETE_FIELD, "n": {"x": firestore.DELETE_FIELD}}
    ) == {
        "f": 1,
        "l": [3],
        "h": {},
    }
    fresh = backend.doc("statuses/fresh")
    rider.ride(StagedWrite(WriteKind.SET, fresh, {"m": {"n": 1}}, merge=True))
    assert backend.fields(fresh.path) == {"m": {"n": 1}}


def test_increment_adds_to_numbers_and_replaces_anything_else(backend: Backend) -> None:
    rider = Rider(backend)
    doc = backend.doc("statuses/counted")
    rider.ride(StagedWrite(WriteKind.SET, doc, {"i": 1, "f": 1.5, "j": 1, "s": "x", "b": True, "null": None}))
    rider.ride(
        StagedWrite(
            WriteKind.SET,
            doc,
            {
                "i": firestore.Increment(2),
                "f": firestore.Increment(1),
                "j": firestore.Increment(0.5),
                "s": firestore.Increment(3),
                "b": firestore.Increment(2),
                "null": firestore.Increment(1),
                "new": firestore.Increment(4),
                "m": {"n": firestore.Increment(1)},
            },
            merge=True,
        )
    )
    got = backend.fields(doc.path)
    assert got == {"i": 3, "f": 2.5, "j": 1.5, "s": 3, "b": 2, "null": 1, "new": 4, "m": {"n": 1}}
    assert got is not None and type(got["i"]) is int and type(got["j"]) is float
    rider.ride(
        StagedWrite(WriteKind.UPDATE, doc, {"i": firestore.Increment(-5), "m.n": firestore.Increment(1)})
    )
    got = backend.fields(doc.path)
    assert got is not None and (got["i"], got["m"]) == (-2, {"n": 2})


def test_array_and_extremum_transforms(backend: Backend) -> None:
    rider = Rider(backend)
    doc = backend.doc("statuses/arrays")
    rider.ride(StagedWrite(WriteKind.SET, doc, {"a": [1, 2], "s": "x", "i": 5, "f": 2.5, "eq": 3, "b": True}))
    rider.ride(
        StagedWrite(
            WriteKind.UPDATE,
            doc,
            {
                "a": firestore.ArrayUnion([2, 3, 3]),
                "s": firestore.ArrayUnion([1]),
                "none": firestore.ArrayRemove([1]),
                "i": firestore.Maximum(7),
                "f": firestore.Minimum(1),
                "eq": firestore.Maximum(3.0),
                "b": firestore.Maximum(1),
                "new": firestore.Minimum(2.5),
            },
        )
    )
    got = backend.fields(doc.path)
    assert got == {"a": [1, 2, 3], "s": [1], "none": [], "i": 7, "f": 1, "eq": 3, "b": 1, "new": 2.5}
    assert type(got["f"]) is int and type(got["eq"]) is int  # the smaller operand; the stored one when equal
    rider.ride(StagedWrite(WriteKind.UPDATE, doc, {"a": firestore.ArrayRemove([1.0, 3])}))
    assert backend.fields(doc.path) == {**got, "a": [2]}  # 1.0 removes 1: numbers compare by value


def test_a_reserved_field_name_refuses_the_commit(backend: Backend) -> None:
    rider = Rider(backend)
    for data in ({"__x__": 1}, {"m": {"__x__": 1}}):
        with pytest.raises(StaleWrite) as refused:
            rider.ride(StagedWrite(WriteKind.SET, backend.doc("others/reserved"), data))
        assert refused.value.refusal is not None and refused.value.refusal.startswith("400 ")
    assert backend.snapshot("others/reserved") is None
    rider.ride(StagedWrite(WriteKind.SET, backend.doc("others/reserved"), {"__x": 1, "_y_": 2}))


def test_an_update_of_another_document_deletes_fields_and_keeps_the_rest(backend: Backend) -> None:
    rider = Rider(backend)
    doc = backend.doc("statuses/updated")
    rider.ride(StagedWrite(WriteKind.SET, doc, {"a": 1, "m": {"x": 1, "y": 2}, "gone": 0}))
    rider.ride(
        StagedWrite(WriteKind.UPDATE, doc, {"gone": firestore.DELETE_FIELD, "m.x": firestore.DELETE_FIELD})
    )
    assert backend.fields(doc.path) == {"a": 1, "m": {"y": 2}}


def test_a_write_that_changes_another_document_nowhere_keeps_its_update_time(backend: Backend) -> None:
    rider = Rider(backend)
    doc = backend.doc("statuses/same")
    first = rider.ride(StagedWrite(WriteKind.SET, doc, {"v": 1}))
    second = rider.ride(StagedWrite(WriteKind.SET, doc, {"v": 1}))
    snapshot = backend.snapshot(doc.path)
    assert second > first
    assert snapshot is not None and snapshot.update_time == first


# -- the audit's reader ---------------------------------------------------------------------


def test_the_audits_reader_returns_the_records_that_exist_projected_to_what_it_judges(
    backend: Backend,
) -> None:
    backend.store.create("run-a", {"status": "completed", "n": 1}, timeout=TIMEOUT)
    backend.store.create("run-b", {"n": 2}, timeout=TIMEOUT)
    got = backend.reader(["run-a", "missing", "run-b"])
    # Only the fields the audit's verdict reads travel; a record holding none of them still exists.
    assert {run_id: dict(stored.fields) for run_id, stored in got.items()} == {
        "run-a": {"status": "completed"},
        "run-b": {},
    }
    assert all(stored.read_time >= stored.update_time for stored in got.values())


# -- the memory store's own tools -----------------------------------------------------------


@pytest.fixture
def store() -> Iterator[MemoryRunStore]:
    store = MemoryRunStore(RUNS, clock=ServerClock(datetime(2026, 3, 1, tzinfo=UTC)))
    yield store
    # Every fault scripted was met: a script no call took tested nothing.
    assert all(store.scripted(operation) == 0 for operation in Operation)


def test_the_server_clock_moves_only_when_told_and_both_its_faces_together() -> None:
    clock = ServerClock(datetime(2026, 3, 1, tzinfo=UTC), monotonic_start=50.0)
    assert (clock.now(), clock.monotonic()) == (datetime(2026, 3, 1, tzinfo=UTC), 50.0)
    clock.advance(1.5)
    clock.sleep(0.25)
    assert (clock.now(), clock.monotonic()) == (datetime(2026, 3, 1, 0, 0, 1, 750000, tzinfo=UTC), 51.75)
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        ServerClock(datetime(2026, 3, 1))


def test_each_commit_moves_the_clock_a_microsecond_and_reads_see_every_commit(store: MemoryRunStore) -> None:
    start = store.clock.now()
    created = store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    updated = store.update(RUN, {"n": 1}, if_updated_at=created, timeout=TIMEOUT)
    assert (created, updated) == (start + timedelta(microseconds=1), start + timedelta(microseconds=2))
    record = store.get(RUN, timeout=TIMEOUT)
    assert record is not None and record.read_time == store.clock.now() == updated


def test_the_store_shows_any_document_and_its_records_in_bulk(store: MemoryRunStore) -> None:
    created = store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    store.create("run-2", {"n": 2}, timeout=TIMEOUT)
    status = JobStatuses(store, RUNS).document(KEY)
    store.update(
        RUN,
        {"n": 1},
        if_updated_at=created,
        timeout=TIMEOUT,
        also=[StagedWrite(WriteKind.SET, status, {"x": 1})],
    )
    assert store.document(status.path) == {"x": 1}
    assert store.document(store.record_path(RUN)) == {"n": 1}
    assert store.document("nowhere/nothing") is None
    assert {run_id: record.fields for run_id, record in store.records().items()} == {
        RUN: {"n": 1},
        "run-2": {"n": 2},
    }
    read = stored_record_reader(store)(["run-2", "missing"])
    assert list(read) == ["run-2"] and read["run-2"].read_time == store.clock.now()


def test_a_lost_answer_commits_and_the_retry_finds_its_own_write(store: MemoryRunStore) -> None:
    start = store.clock.monotonic()
    store.script(Operation.CREATE, LOST_ANSWER)
    with pytest.raises(RecordExists) as exists:
        store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    assert exists.value.unheard
    # The lost try waited out its own timeout, then the retry's pause.
    assert store.clock.monotonic() - start == pytest.approx(store.attempt_seconds + FIRST_RETRY_PAUSE_SECONDS)
    record = store.get(RUN, timeout=TIMEOUT)
    assert record is not None and record.fields == {"n": 0}

    store.script(Operation.UPDATE, LOST_ANSWER)
    with pytest.raises(StaleWrite) as stale:
        store.update(RUN, {"n": 1}, if_updated_at=record.update_time, timeout=TIMEOUT)
    assert stale.value.unheard and stale.value.refusal is None
    updated = store.get(RUN, timeout=TIMEOUT)
    assert updated is not None and updated.fields == {"n": 1}

    status = offline_client().document("statuses/job")
    store.script(Operation.DELETE, LOST_ANSWER)
    with pytest.raises(StaleWrite) as stale:
        also = [StagedWrite(WriteKind.SET, status, {"n": firestore.Increment(1)}, merge=True)]
        store.delete(RUN, if_updated_at=updated.update_time, timeout=TIMEOUT, also=also)
    assert stale.value.unheard and stale.value.refusal is not None
    assert store.get(RUN, timeout=TIMEOUT) is None
    assert store.document(status.path) == {"n": 1}  # applied once: the retry was refused whole
    assert store.rpcs == {Operation.CREATE: 2, Operation.UPDATE: 2, Operation.DELETE: 2, Operation.GET: 3}
    assert store.calls[Operation.CREATE] == 1


def test_no_answer_commits_and_raises_once_no_retry_fits(store: MemoryRunStore) -> None:
    start = store.clock.monotonic()
    store.script(Operation.CREATE, NO_ANSWER)
    with pytest.raises(google_exceptions.DeadlineExceeded):
        store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    assert store.document(store.record_path(RUN)) == {"n": 0}
    # Two tries of a third of the deadline each fit in it, and a pause between them.
    assert store.rpcs[Operation.CREATE] == 2
    elapsed = store.clock.monotonic() - start
    assert elapsed == pytest.approx(2 * store.attempt_seconds + FIRST_RETRY_PAUSE_SECONDS, abs=1e-5)


def test_unavailable_writes_nothing_and_is_retried_until_the_deadline(store: MemoryRunStore) -> None:
    start = store.clock.monotonic()
    store.script(Operation.CREATE, UNAVAILABLE)
    with pytest.raises(google_exceptions.ServiceUnavailable):
        store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    assert store.document(store.record_path(RUN)) is None
    assert store.rpcs[Operation.CREATE] > 2
    elapsed = store.clock.monotonic() - start
    assert TIMEOUT - 2 * store.attempt_seconds < elapsed <= TIMEOUT
    store.script(Operation.GET, UNAVAILABLE)
    with pytest.raises(google_exceptions.ServiceUnavailable):
        store.get(RUN, timeout=TIMEOUT)
    store.script(Operation.GET_ALL, UNAVAILABLE)
    with pytest.raises(google_exceptions.ServiceUnavailable):
        stored_record_reader(store)([RUN])
    assert store.rpcs[Operation.GET_ALL] == 1  # the audit's read is one try of its whole timeout


def test_a_slow_answer_comes_late_on_the_server_clock(store: MemoryRunStore) -> None:
    store.script(Operation.CREATE, SLOW(12))
    sent = store.clock.now()
    created = store.create(RUN, {"n": 0}, timeout=TIMEOUT)
    assert created == sent + timedelta(microseconds=1)
    assert store.clock.now() == created + timedelta(seconds=12)
    store.script(Operation.GET, SLOW(3))
    record = store.get(RUN, timeout=TIMEOUT)
    assert record is not None and record.read_time == store.clock.now() - timedelta(seconds=3)
    assert store.rpcs == {Operation.CREATE: 1, Operation.GET: 1}


def test_a_lost_answer_without_time_for_a_retry_is_no_answer(store: MemoryRunStore) -> None:
    store.script(Operation.CREATE, LOST_ANSWER)
    with pytest.raises(google_exceptions.DeadlineExceeded):
        store.create(RUN, {"n": 0}, timeout=store.attempt_seconds * 1.5)
    assert store.document(store.record_path(RUN)) == {"n": 0}
    assert store.rpcs[Operation.CREATE] == 1


def test_hooks_land_a_rivals_write_between_a_calls_rpcs(store: MemoryRunStore) -> None:
    created = store.create(RUN, {"n": 0}, timeout=TIMEOUT)

    def rival() -> None:
        store.update(RUN, {"n": "rival"}, if_updated_at=created, timeout=TIMEOUT)

    store.script(Operation.UPDATE, before=rival)
    with pytest.raises(StaleWrite) as stale:
        store.update(RUN, {"n": 1}, if_updated_at=created, timeout=TIMEOUT)
    assert not stale.value.unheard
    assert store.document(store.record_path(RUN)) == {"n": "rival"}

    # The create commits, its answer is lost, the record is deleted before the retry: the
    # retry creates it again, as FirestoreRunStore's would.
    def deleted() -> None:
        record = store.get("run-2", timeout=TIMEOUT)
        assert record is not None
        store.delete("run-2", if_updated_at=record.update_time, timeout=TIMEOUT)

    store.script(Operation.CREATE, LOST_ANSWER, after=deleted)
    recreated = store.create("run-2", {"n": 0}, timeout=TIMEOUT)
    record = store.get("run-2", timeout=TIMEOUT)
    assert record is not None and record.create_time == recreated


def test_scripts_are_taken_in_order_one_call_each(store: MemoryRunStore) -> None:
    store.script("get", UNAVAILABLE)
    store.script("get", SLOW(1))
    assert store.scripted(Operation.GET) == 2
    with pytest.raises(google_exceptions.ServiceUnavailable):
        store.get(RUN, timeout=TIMEOUT)
    before = store.clock.now()
    assert store.get(RUN, timeout=TIMEOUT) is None
    assert store.clock.now() == before + timedelta(seconds=1)
    assert store.scripted(Operation.GET) == 0
    store.reset_counts()
    store.get(RUN, timeout=TIMEOUT)
    assert (store.calls, store.rpcs) == ({Operation.GET: 1}, {Operation.GET: 1})


def test_the_ledger_recognises_its_own_claim_whose_answer_was_lost(store: MemoryRunStore) -> None:
    ledger = RunLedger(store, lease=LEASE, retention=RETENTION, clock=FakeClock())
    store.script(Operation.CREATE, LOST_ANSWER)
    claim = ledger.claim(KEY, "attempt-1")
    assert claim.kind is ClaimKind.CREATED
    status = JobStatuses(store, RUNS)
    ledger.complete(claim, also=[status.succeeded(KEY, KEY.run_id, '{"rows": 1}')])
    record = store.records()[KEY.run_id]
    assert record.fields["status"] == "completed"
    job = store.document(status.document(KEY).path)
    assert job is not None and job["consecutive_failures"] == 0
    assert job["last_success"]["ended_at"] == record.fields["completed_at"]


# -- other documents of the database: named, read, and written conditioned on a read --------


def test_any_document_of_the_database_is_read_by_its_path_with_its_times(backend: Backend) -> None:
    reference = backend.store.reference("others/status")
    assert reference.path == "others/status"
    assert backend.store.read("others/status", timeout=TIMEOUT) is None
    backend.commit([StagedWrite(WriteKind.SET, reference, {"n": 1})])
    read = backend.store.read("others/status", timeout=TIMEOUT)
    assert read is not None and read.fields == {"n": 1}
    assert read.update_time == (backend.snapshot("others/status") or read).update_time


def test_a_write_conditioned_on_a_document_as_read_refuses_the_whole_commit_once_it_changed(
    backend: Backend,
) -> None:
    """A decision made on a read (a paused job's skip) rides in a commit only while what it was
    decided on still stands: the record's write and every other one are refused with it."""
    rider = Rider(backend)
    status = backend.store.reference("others/status")
    backend.commit([StagedWrite(WriteKind.SET, status, {"failed": 2})])
    as_read = backend.store.read("others/status", timeout=TIMEOUT)
    assert as_read is not None
    backend.commit([StagedWrite(WriteKind.SET, status, {"failed": 0})])  # a success, meanwhile
    conditioned = StagedWrite(WriteKind.UPDATE, status, {"skipped": True}, if_updated_at=as_read.update_time)
    with pytest.raises(StaleWrite) as refused:
        rider.ride(conditioned, StagedWrite(WriteKind.SET, backend.doc("others/effect"), {"x": 1}))
    assert refused.value.refusal is not None
    assert backend.fields("others/status") == {"failed": 0}
    assert backend.fields("others/effect") is None
    assert (backend.fields(f"{RUNS}/{RUN}") or {})["round"] == 0
    now = backend.store.read("others/status", timeout=TIMEOUT)
    assert now is not None
    rider.ride(StagedWrite(WriteKind.UPDATE, status, {"skipped": True}, if_updated_at=now.update_time))
    assert backend.fields("others/status") == {"failed": 0, "skipped": True}
