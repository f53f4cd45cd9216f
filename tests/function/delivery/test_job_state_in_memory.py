"""A job's failure streak and pause (ledger/lifecycle/job_state.py) through the delivery path in memory:
lost answers, a success or a resume landing between a skip's read and its commit, the key
removed and put back, the limit raised while paused."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once import TerminalJobError
from exactly_once.config import JobPolicy, OverlapPolicy
from exactly_once.context import RunContext
from exactly_once.delivery.scheduler_request import run_key_from_headers
from exactly_once.ledger.job_status import resume_fields
from exactly_once.ledger.writes import StagedWrite, WriteKind
from exactly_once.testing.memory_store import LOST_ANSWER, SLOW, MemoryRunStore, Operation, ServerClock
from tests.support.memory_delivery import MemoryInstance, run_id_at, scheduler_headers

PAUSED_LINE = "job_paused_after_failures"


class Scripted:
    """Fails the runs named in `failing` (terminally: one commit each), succeeds the others;
    counts the runs it was called for."""

    def __init__(self, *failing: datetime) -> None:
        self.failing = set(failing)
        self.calls: list[datetime] = []

    def fail(self, *times: datetime) -> None:
        self.failing.update(times)

    def __call__(self, run: RunContext) -> Any:
        self.calls.append(run.schedule_time)
        if run.schedule_time in self.failing:
            raise TerminalJobError("downstream gone")
        return {"ok": True}


@pytest.fixture
def store() -> MemoryRunStore:
    return MemoryRunStore()


def minutes(store: MemoryRunStore, count: int) -> list[datetime]:
    """`count` schedule times a minute apart, the first one a minute past the store's now, each
    delivered at its time (the test moves the clock there)."""
    base = store.clock.now().replace(second=0, microsecond=0) + timedelta(minutes=1)
    return [base + timedelta(minutes=index) for index in range(count)]


def at(store: MemoryRunStore, moment: datetime) -> datetime:
    if moment > store.clock.now():
        store.clock.advance((moment - store.clock.now()).total_seconds())
    return moment


def status(store: MemoryRunStore) -> dict[str, Any]:
    return store.document(f"{'scheduler_runs_job_status'}/acme|europe-west1|nightly") or {}


def outcome(instance: MemoryInstance, moment: datetime) -> str:
    return str(instance.deliver(at(instance.store, moment)).body["outcome"])


def test_a_pause_whose_recording_commit_lost_its_answer_is_announced_once(store):
    a, b, c, d = minutes(store, 4)
    job = Scripted(a, b)
    function = MemoryInstance(store, job, pause_after_failures={"nightly": 2})
    assert [outcome(function, a), outcome(function, b)] == ["failed_terminal"] * 2
    # The skip's commit records the pause; its answer is lost and its retry is refused, since
    # the commit had landed: that refusal is our own write, so the pause is ours to announce.
    store.script(Operation.UPDATE, LOST_ANSWER)
    assert outcome(function, c) == "skipped_paused"
    assert store.scripted(Operation.UPDATE) == 0
    assert status(store)["failure_paused_after"] == [run_id_at(a), run_id_at(b)]
    assert len(function.lines(PAUSED_LINE)) == 1
    assert outcome(function, d) == "skipped_paused"
    assert len(function.lines(PAUSED_LINE)) == 1
    assert job.calls == [a, b]


@pytest.mark.parametrize("meanwhile", ["the failing run's retry succeeded", "ops resume"])
def test_a_skip_decided_before_a_success_or_resume_committed_is_refused_and_the_run_executes(
    store, meanwhile
):
    a, b, c = minutes(store, 3)
    job = Scripted(a, b)
    function = MemoryInstance(store, job, pause_after_failures={"nightly": 2})
    assert [outcome(function, a), outcome(function, b)] == ["failed_terminal"] * 2
    statuses = function.statuses
    key_b = run_key_from_headers(scheduler_headers(b))
    if meanwhile == "ops resume":
        ended: StagedWrite = StagedWrite(WriteKind.SET, statuses.document(key_b), resume_fields(), merge=True)
    else:
        ended = statuses.succeeded(key_b, key_b.run_id, None)
    # Between the delivery's read of the status and its skip's commit, the streak ends.
    store.script(Operation.UPDATE, before=lambda: store.commit([ended]))
    reply = function.deliver(at(store, c))
    assert reply.body["outcome"] == "executed"
    assert job.calls == [a, b, c]
    record = store.document(store.record_path(run_id_at(c))) or {}
    assert (record["status"], record["result"]) == ("completed", "succeeded")
    assert function.lines(PAUSED_LINE) == []


def test_a_success_ends_the_streak_whatever_the_serving_table_says(store):
    """The key removed (or a region still on an older table): a success there still clears the
    failures, so the key put back pauses nothing the job has since got past."""
    a, b, c, d = minutes(store, 4)
    job = Scripted(a)
    with_key = MemoryInstance(store, job, pause_after_failures={"nightly": 1})
    without_key = MemoryInstance(store, job)
    assert outcome(with_key, a) == "failed_terminal"
    assert [outcome(without_key, b), outcome(without_key, c)] == ["executed"] * 2
    assert status(store)["failed_runs"] == []
    assert outcome(with_key, d) == "executed"
    assert job.calls == [a, b, c, d]


def test_a_limit_raised_while_paused_pauses_and_announces_again_after_that_many_failures(store):
    a, b, c, d, e = minutes(store, 5)
    job = Scripted(a, c, d)
    at_one = MemoryInstance(store, job, pause_after_failures={"nightly": 1})
    assert [outcome(at_one, a), outcome(at_one, b)] == ["failed_terminal", "skipped_paused"]
    assert len(at_one.lines(PAUSED_LINE)) == 1
    at_three = MemoryInstance(store, job, pause_after_failures={"nightly": 3})
    assert [outcome(at_three, c), outcome(at_three, d)] == ["failed_terminal"] * 2
    assert outcome(at_three, e) == "skipped_paused"
    [line] = at_three.lines(PAUSED_LINE)
    assert line["failed_runs"] == [run_id_at(a), run_id_at(c), run_id_at(d)]
    assert status(store)["failure_paused_after"] == line["failed_runs"]
    assert job.calls == [a, c, d]


def test_a_limit_lowered_while_paused_keeps_the_pause_without_a_second_line(store):
    a, b, c, d = minutes(store, 4)
    job = Scripted(a, b)
    at_two = MemoryInstance(store, job, pause_after_failures={"nightly": 2})
    assert [outcome(at_two, a), outcome(at_two, b), outcome(at_two, c)] == [
        "failed_terminal",
        "failed_terminal",
        "skipped_paused",
    ]
    assert len(at_two.lines(PAUSED_LINE)) == 1
    at_one = MemoryInstance(store, job, pause_after_failures={"nightly": 1})
    assert outcome(at_one, d) == "skipped_paused"
    assert at_one.lines(PAUSED_LINE) == []
    assert job.calls == [a, b]


def test_the_overlap_lock_is_the_run_keys_so_a_renamed_job_waits_for_its_old_names_run(store):
    """Mid-deploy, one region's table still names the job by its old id while the other's names
    it by its new one, both keyed by the same run key: they share one lock."""
    a, b = minutes(store, 2)
    started, finish = threading.Event(), threading.Event()

    def long_job(run: RunContext) -> Any:
        started.set()
        assert finish.wait(timeout=30)
        return {"done": True}

    old_table = MemoryInstance(store, long_job, jobs={"nightly": JobPolicy(overlap=OverlapPolicy.SKIP)})
    renamed = JobPolicy(overlap=OverlapPolicy.SKIP, run_key="nightly")
    new_table = MemoryInstance(store, Scripted(), jobs={"nightly-renamed": renamed})
    at(store, b)
    running = threading.Thread(target=old_table.deliver, args=(a,))
    running.start()
    try:
        assert started.wait(timeout=30)
        assert new_table.deliver(b, job="nightly-renamed").body["outcome"] == "overlap_skipped"
    finally:
        finish.set()
        running.join(timeout=30)


# The night Europe/Berlin's clocks go back: 02:15 is 00:15 UTC (CEST), then 01:15 UTC (CET).
FIRST_0215 = datetime(2026, 10, 25, 0, 15, tzinfo=UTC)
SECOND_0215 = datetime(2026, 10, 25, 1, 15, tzinfo=UTC)


@pytest.fixture
def fall_back_night() -> MemoryRunStore:
    return MemoryRunStore(clock=ServerClock(FIRST_0215 - timedelta(minutes=1)))


def test_both_instants_of_a_repeated_wall_time_are_one_run_executed_once(fall_back_night):
    store = fall_back_night
    job = Scripted()
    function = MemoryInstance(store, job, jobs={"nightly": JobPolicy(time_zone="Europe/Berlin")})
    assert outcome(function, FIRST_0215) == "executed"
    second = function.deliver(at(store, SECOND_0215))
    assert (second.body["outcome"], second.body["run_id"]) == ("duplicate_completed", run_id_at(FIRST_0215))
    assert job.calls == [FIRST_0215]
    # In a zone without the repeat (UTC), the same two instants are two runs.
    utc = MemoryInstance(store, job, jobs={"hourly": JobPolicy(time_zone="UTC")})
    assert [
        str(utc.deliver(moment, job="hourly").body["outcome"]) for moment in (FIRST_0215, SECOND_0215)
    ] == [
        "executed",
        "executed",
    ]


def test_the_second_instant_of_a_repeated_wall_time_retries_a_first_that_failed(fall_back_night):
    """The first instant failed every attempt it got: the second is that run's retry, recorded
    under the run id the audit expects, so the run is neither lost silently nor run twice."""
    store = fall_back_night
    job = Scripted(FIRST_0215)
    function = MemoryInstance(store, job, jobs={"nightly": JobPolicy(time_zone="Europe/Berlin")})
    assert outcome(function, FIRST_0215) == "failed_terminal"
    assert outcome(function, SECOND_0215) == "duplicate_completed"
    record = store.document(store.record_path(run_id_at(FIRST_0215))) or {}
    assert record["result"] == "terminal_failure"
    assert store.document(store.record_path(run_id_at(SECOND_0215))) is None
    assert job.calls == [FIRST_0215]


@pytest.mark.parametrize("overlap", [OverlapPolicy.ALLOW, OverlapPolicy.SKIP])
def test_a_job_status_read_answered_past_the_leases_give_up_point_gives_the_run_back_unrun(store, overlap):
    # The pause check's read of the job's status comes back 45 s late, past the 30 s lease: the
    # run may be another attempt's by then, so the job never starts; the next delivery runs it.
    (a,) = minutes(store, 1)
    job = Scripted()
    jobs = {"nightly": JobPolicy(overlap=overlap)}
    function = MemoryInstance(store, job, jobs=jobs, pause_after_failures={"nightly": 2})
    store.script(Operation.GET, SLOW(45))
    reply = function.deliver(at(store, a))
    assert (reply.status, reply.body["outcome"]) == (500, "store_error"), reply.body
    assert "give-up point" in reply.body["message"] and job.calls == []
    assert store.scripted(Operation.GET) == 0
    assert outcome(function, a) == "executed" and job.calls == [a]
