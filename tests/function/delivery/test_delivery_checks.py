"""Deliveries an adversary sends: a redo past the warm cache, the same run with other bytes,
a run recorded by another function, a terminal error that cannot be stored as it is."""

from __future__ import annotations

import json

from google.cloud import firestore

from exactly_once.errors import MAX_ERROR_BYTES
from exactly_once.router import JobRouter
from tests.function import sample_jobs
from tests.support.handler_harness import HEADERS, Harness
from tests.support.ledger_runs import KEY

NO_CACHE = {**HEADERS, "cache-control": "no-cache"}


def test_no_cache_is_decided_by_the_ledger_never_by_the_warm_cache(db):
    """The runbook's redo: an operator deletes a run's record and re-delivers it. An instance
    that saw the run completed would answer from memory; `Cache-Control: no-cache` makes the
    ledger decide, and the run executes again. Scheduler's own retries keep the cached answer."""
    harness = Harness(db, "tests.function.sample_jobs:record_call")
    assert harness.deliver().body["outcome"] == "executed"
    db.collection("scheduler_runs").document(KEY.run_id).delete()  # the operator's redo

    cached = harness.deliver()
    assert cached.body["outcome"] == "duplicate_completed" and harness.log_lines()[-1]["cached"] is True
    redo = harness.deliver(headers=NO_CACHE)
    assert (redo.status, redo.body["outcome"]) == (200, "executed")
    assert harness.log_lines()[-1]["no_cache"] is True
    assert len(sample_jobs.CALLS) == 2

    assert harness.deliver(headers=NO_CACHE).body["outcome"] == "duplicate_completed"  # by the ledger
    assert "cached" not in harness.log_lines()[-1]
    assert len(sample_jobs.CALLS) == 2


def test_a_duplicate_with_another_body_is_flagged_when_answered_from_memory_too(db):
    harness = Harness(db, "tests.function.sample_jobs:record_call")
    assert harness.deliver(body=b'{"a": 1}').body["outcome"] == "executed"
    same = harness.deliver(body=b'{"a": 1}')
    assert harness.log_lines()[-1]["cached"] is True and "body_mismatch" not in same.body
    changed = harness.deliver(body=b'{"a": 2}')
    assert harness.log_lines()[-1]["cached"] is True
    assert (changed.body["outcome"], changed.body["body_mismatch"]) == ("duplicate_completed", True)


def test_the_same_run_with_another_body_is_answered_from_the_record_and_flagged(db):
    first = Harness(db, "tests.function.sample_jobs:record_call")
    assert first.deliver(body=b'{"a": 1}').body["outcome"] == "executed"
    other = Harness(db, "tests.function.sample_jobs:record_call", name="other")

    same = other.deliver(body=b'{"a": 1}')
    assert same.body["outcome"] == "duplicate_completed" and "body_mismatch" not in same.body
    changed = other.deliver(headers=NO_CACHE, body=b'{"a": 2}')
    assert (changed.status, changed.body["outcome"]) == (200, "duplicate_completed")
    assert changed.body["body_mismatch"] is True
    assert other.log_lines()[-1]["body_mismatch"] is True
    assert len(sample_jobs.CALLS) == 1


def test_a_run_recorded_by_another_function_is_refused_loudly(db):
    """Two functions share a runs collection and a job name: neither may answer the other's
    runs as duplicates (one job would silently never run)."""
    ours = Harness(db, "tests.function.sample_jobs:record_call", target="billing/main.report")
    theirs = Harness(db, "tests.function.sample_jobs:record_call", target="crm/main.report", name="crm")
    assert ours.deliver().body["outcome"] == "executed"

    refused = theirs.deliver()
    assert (refused.status, refused.body["outcome"]) == (409, "wrong_target")
    assert "billing/main.report" in refused.body["message"]
    line = theirs.log_lines()[-1]
    assert (line["severity"], line["recorded_target"], line["target"]) == (
        "ERROR",
        "billing/main.report",
        "crm/main.report",
    )
    assert len(sample_jobs.CALLS) == 1
    assert ours.deliver().body["outcome"] == "duplicate_completed"


def test_a_terminal_error_is_recorded_once_however_large_or_unencodable(db):
    for message in ("x" * (2 * 1024 * 1024), "bad \udc80 surrogate"):
        sample_jobs.CALLS.clear()
        db_project = firestore.Client(project=f"{db.project}-{len(message)}")
        harness = Harness(db_project, "tests.function.sample_jobs:record_call")
        harness.handler._job = JobRouter(sample_jobs.fail_terminal_with(message), {}).run
        first = harness.deliver()
        assert (first.status, first.body["outcome"]) == (200, "failed_terminal")
        stored = harness.runs()[0].to_dict()["error"]
        assert len(stored.encode()) <= MAX_ERROR_BYTES
        assert stored.startswith(message[:20].replace("\udc80", "\\udc80"))
        again = Harness(db_project, "tests.function.sample_jobs:record_call", name="again")
        assert again.deliver().body["outcome"] == "duplicate_completed"
        assert len(sample_jobs.CALLS) == 1
        assert len(json.dumps(harness.log_lines()[-1])) < 2 * MAX_ERROR_BYTES
