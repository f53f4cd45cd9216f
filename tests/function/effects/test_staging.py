"""What context.writes and context.checkpoint refuse when the job calls them, before anything
is written: no Firestore is needed to stage (the client below never sends an RPC)."""

from __future__ import annotations

import math

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from exactly_once import TerminalJobError
from exactly_once.context import MAX_CHECKPOINT_BYTES
from exactly_once.ledger.writes import WriteKind
from exactly_once.run_writes import MAX_DOCUMENT_BYTES, MAX_STAGED_BYTES, RunWrites, WriteScope
from tests.support.run_contexts import run_context

RUNS = "scheduler_runs"


def client(database: str = "(default)") -> firestore.Client:
    return firestore.Client(project="acme", database=database, credentials=AnonymousCredentials())


def writes() -> RunWrites:
    return RunWrites(WriteScope.of(client(), RUNS))


def test_each_kind_is_staged_in_order_with_its_values():
    staged = writes()
    reports = client().collection("reports")
    staged.create(reports.document("a"), {"n": 1})
    staged.set(reports.document("b"), {"n": firestore.Increment(1)}, merge=True)
    staged.update(reports.document("c"), {"n": firestore.DELETE_FIELD})
    staged.delete(reports.document("d"))
    kinds = [(w.kind, w.document.id, w.merge) for w in staged.staged()]
    assert kinds == [
        (WriteKind.CREATE, "a", False),
        (WriteKind.SET, "b", True),
        (WriteKind.UPDATE, "c", False),
        (WriteKind.DELETE, "d", False),
    ]


def test_a_document_of_another_database_or_project_is_refused():
    for other in (client("elsewhere"), firestore.Client(project="other", credentials=AnonymousCredentials())):
        with pytest.raises(TerminalJobError, match=r"not in the ledger.s database projects/acme/databases/"):
            writes().set(other.collection("reports").document("a"), {"n": 1})


def test_the_ledgers_own_records_are_refused():
    with pytest.raises(TerminalJobError, match="scheduler_runs holds the ledger's own records"):
        writes().delete(client().collection(RUNS).document("some-run"))


def test_what_the_client_cannot_encode_or_an_empty_update_is_refused_when_staged():
    document = client().collection("reports").document("a")
    with pytest.raises(TerminalJobError, match="cannot encode"):
        writes().set(document, {"when": object()})
    with pytest.raises(TerminalJobError, match="no fields to update"):
        writes().update(document, {})
    with pytest.raises(TerminalJobError, match=r"expected a google.cloud.firestore DocumentReference"):
        writes().create("reports/a", {"n": 1})  # type: ignore[arg-type]


def test_a_checkpoint_is_strict_json_and_bounded():
    context = run_context()
    context.checkpoint({"step": 1})
    assert context.progress.latest() == '{"step":1}'
    with pytest.raises(TerminalJobError, match="a checkpoint cannot be stored as JSON: not JSON"):
        context.checkpoint({"ratio": math.nan})
    with pytest.raises(TerminalJobError, match=f"more than the {MAX_CHECKPOINT_BYTES} bytes"):
        context.checkpoint(["x" * 100] * (MAX_CHECKPOINT_BYTES // 100 + 1))
    assert context.progress.latest() == '{"step":1}'  # a refused value replaces nothing
    assert context.last_checkpoint is None


def test_a_write_larger_than_a_document_or_than_the_commit_has_room_for_is_refused():
    reports = client().collection("reports")
    with pytest.raises(
        TerminalJobError, match=f"more than the {MAX_DOCUMENT_BYTES} a Firestore document holds"
    ):
        writes().set(reports.document("huge"), {"blob": "x" * MAX_DOCUMENT_BYTES})
    staged = writes()
    almost = MAX_DOCUMENT_BYTES - 1000
    for n in range(MAX_STAGED_BYTES // almost):
        staged.set(reports.document(f"r{n}"), {"blob": "x" * almost})
    with pytest.raises(TerminalJobError, match=f"at most {MAX_STAGED_BYTES} bytes of writes"):
        staged.set(reports.document("one-too-many"), {"blob": "x" * almost})
    assert len(staged) == MAX_STAGED_BYTES // almost
