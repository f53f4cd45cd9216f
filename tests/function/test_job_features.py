"""Stored outputs, the warm cache and overlap policies, in-process on the emulator, with the
Firestore RPCs of every path counted on the wire."""

from __future__ import annotations

import json

import pytest

from exactly_once.config import OverlapPolicy
from exactly_once.context import MAX_OUTPUT_BYTES
from exactly_once.delivery.scheduler_request import (
    run_key_from_headers,
)
from exactly_once.delivery.warm_cache import ENTRY_OVERHEAD_BYTES, CompletedRuns
from tests.support.instances import SECOND, Gate, Instance, headers, hold_first_run
from tests.support.ledger_runs import SHORT_LEASE
from tests.support.waiting import wait_until


@pytest.fixture
def instance(emulator_host, project):
    return lambda job, **options: Instance(emulator_host, project, job, **options)


# --- stored output -------------------------------------------------------------------------


def test_output_is_stored_with_the_completion_and_answered_to_duplicates(instance):
    calls: list[str] = []

    def report(run):
        calls.append(run.run_id)
        return {"rows": 1234, "files": ["a.csv"]}

    first = instance(report)
    executed = first.deliver()
    assert (executed.status, executed.body["outcome"]) == (200, "executed")
    assert executed.body["output"] == {"rows": 1234, "files": ["a.csv"]}
    assert first.cost() == 2  # the output rides on the completing write

    other = instance(report)  # another instance: the answer comes from the ledger
    duplicate = other.deliver()
    assert (duplicate.body["outcome"], duplicate.body["output"]) == (
        "duplicate_completed",
        executed.body["output"],
    )
    assert other.cost() == 2
    assert len(calls) == 1


def test_no_return_value_is_a_null_output(instance):
    reply = instance(lambda run: None).deliver()
    assert (reply.body["outcome"], reply.body["output"]) == ("executed", None)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("x" * (MAX_OUTPUT_BYTES + 1), f"more than the {MAX_OUTPUT_BYTES}"),
        ({"ratio": float("nan")}, "not JSON-serialisable"),
        ({1, 2}, "not JSON-serialisable"),
    ],
    ids=["too-large", "nan", "a-set"],
)
def test_an_output_that_cannot_be_stored_is_a_terminal_failure(instance, value, named):
    job = instance(lambda run: value)
    reply = job.deliver()
    assert (reply.status, reply.body["outcome"]) == (200, "failed_terminal")
    line = json.loads(job.logs.getvalue().splitlines()[-1])
    assert named in line["error"]
    assert instance(lambda run: value).deliver().body["outcome"] == "duplicate_completed"


# --- the warm cache ---------------------------------------------------------------------------


def test_a_duplicate_of_a_run_this_instance_completed_costs_no_rpc(instance):
    job = instance(lambda run: {"n": 1})
    job.deliver()
    reply = job.deliver()
    assert (reply.body["outcome"], reply.body["output"]) == ("duplicate_completed", {"n": 1})
    assert job.cost() == 0
    assert json.loads(job.logs.getvalue().splitlines()[-1])["cached"] is True


def test_a_completed_run_seen_once_is_answered_from_memory_afterwards(instance):
    instance(lambda run: {"n": 1}).deliver()
    other = instance(lambda run: {"n": 2})
    other.deliver()
    assert other.cost() == 2  # learnt from the ledger...
    assert other.deliver().body["output"] == {"n": 1}
    assert other.cost() == 0  # ...then answered from memory


def test_the_cache_is_bounded_least_recently_used_first():
    cache = CompletedRuns(max_entries=2, max_bytes=2 * ENTRY_OVERHEAD_BYTES + 10)
    cache.remember("a", "succeeded", None, 60)
    cache.remember("b", "succeeded", None, 60)
    assert cache.get("a") is not None  # a is now the most recently used
    cache.remember("c", "succeeded", None, 60)
    assert (cache.get("a") is not None, cache.get("b"), cache.get("c") is not None) == (True, None, True)
    cache.remember("d", "succeeded", '"0123456789"', 60)  # 12 bytes: one entry too many for the bound
    assert (len(cache), cache.get("d") is not None) == (1, True)


# --- overlap ----------------------------------------------------------------------------------


def test_allow_jobs_keep_the_two_rpc_path(instance):
    job = instance(lambda run: None, overlap={"other": OverlapPolicy.SKIP})
    job.deliver()
    assert job.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}


def test_skip_records_the_overlapping_run_as_skipped_and_never_runs_it(instance):
    gate = Gate()
    first = instance(gate, overlap={"nightly": OverlapPolicy.SKIP})
    holder = hold_first_run(first, gate)
    second = instance(gate, overlap={"nightly": OverlapPolicy.SKIP})
    skipped = second.deliver(SECOND)
    assert (skipped.status, skipped.body["outcome"]) == (200, "overlap_skipped")
    # claim, lock create, lock read, the holder's run record, the skipped record
    assert second.rpcs.snapshot() == {"BatchWrite": 2, "Commit": 1, "BatchGetDocuments": 2}

    gate.finish.set()
    holder.join(timeout=30)
    # claim, lock; complete, unlock
    assert first.rpcs.snapshot() == {"BatchWrite": 2, "Commit": 2}
    again = instance(gate, overlap={"nightly": OverlapPolicy.SKIP}).deliver(SECOND)
    assert again.body["outcome"] == "overlap_skipped"  # later deliveries: the same answer
    assert second.deliver(SECOND).body["outcome"] == "overlap_skipped"
    assert second.cost() == 0
    assert len(gate.runs) == 1


def test_wait_answers_409_until_the_earlier_run_ends_then_runs_once(instance):
    gate = Gate()
    first = instance(gate, overlap={"nightly": OverlapPolicy.WAIT})
    holder = hold_first_run(first, gate)
    second = instance(gate, overlap={"nightly": OverlapPolicy.WAIT})
    waiting = second.deliver(SECOND)
    assert (waiting.status, waiting.body["outcome"]) == (409, "overlap_wait")
    assert 60 <= int(waiting.headers["Retry-After"]) <= 70
    # claim, lock create, lock read, the holder's run record, release
    assert second.rpcs.snapshot() == {"BatchWrite": 2, "Commit": 1, "BatchGetDocuments": 2}

    gate.finish.set()
    holder.join(timeout=30)
    ran = second.deliver(SECOND)
    assert (ran.body["outcome"], ran.body["output"]) == ("executed", {"run": 2})
    assert second.rpcs.snapshot() == {"BatchWrite": 2, "Commit": 2}
    assert second.deliver(SECOND).body["outcome"] == "duplicate_completed"
    assert len(gate.runs) == 2


def test_a_crashed_holders_lock_expires_with_its_lease(instance, emulator_host, project):
    crashed = Instance(emulator_host, project, lambda run: None, lease=SHORT_LEASE)
    ledger_claim = crashed.handler._ledger.claim(run_key_from_headers(headers()), "crashed")
    crashed.locks.acquire(run_key_from_headers(headers()), ledger_claim)  # then the instance dies

    waiter = instance(lambda run: "ran", overlap={"nightly": OverlapPolicy.WAIT}, lease=SHORT_LEASE)
    assert waiter.deliver(SECOND).body["outcome"] == "overlap_wait"
    ran = wait_until(
        lambda: (reply := waiter.deliver(SECOND)).status == 200 and reply,
        timeout=20,
        what="the crashed holder's lock to expire",
        interval=0.2,
    )
    assert (ran.body["outcome"], ran.body["output"]) == ("executed", "ran")
