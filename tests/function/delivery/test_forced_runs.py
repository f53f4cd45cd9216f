"""Forced runs and starting deadlines, in-process on the emulator with the Firestore RPCs counted
on the wire: which run a delivery is, and whether it is late, is decided on Firestore's clock
whatever the instance's own clock says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once.delivery.forced_runs import FORCED_RUN_TOLERANCE
from exactly_once.delivery.scheduler_request import run_key_from_headers
from exactly_once.ledger.protocol import JobResult, RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.run_key import Trigger, format_rfc3339
from tests.support.clock import FakeClock
from tests.support.instances import Instance, headers

SKEW = timedelta(hours=2)


class Recorder:
    """A job that records each run it is given."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, bool]] = []

    def __call__(self, run):
        self.runs.append((run.run_id, run.forced))
        return {"run": len(self.runs)}


@pytest.fixture
def instance(emulator_host, project):
    return lambda job, **options: Instance(emulator_host, project, job, **options)


def at(offset: timedelta) -> str:
    """A ScheduleTime `offset` from now, in whole seconds as Cloud Scheduler writes it."""
    return format_rfc3339((datetime.now(UTC) + offset).replace(microsecond=0))


def ids(time: str) -> tuple[str, str]:
    """The scheduled run's id and the forced run's id of a delivery carrying `time`."""
    key = run_key_from_headers(headers(time=time))
    return key.run_id, key.as_triggered(Trigger.FORCED).run_id


def record(instance: Instance, run_id: str) -> Any:
    client: Any = instance.client
    snapshot = client.collection("scheduler_runs").document(run_id).get()
    return snapshot.to_dict() if snapshot.exists else None


def test_a_forced_run_gets_its_own_identity_for_the_same_two_rpcs(instance):
    job = Recorder()
    time = at(timedelta(seconds=60))
    scheduled_id, forced_id = ids(time)
    first = instance(job)
    reply = first.deliver(headers(time=time))
    assert (reply.status, reply.body["outcome"], reply.body["trigger"]) == (200, "executed", "forced")
    assert reply.body["run_id"] == forced_id
    assert "forced run" in reply.body["message"]
    assert first.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}
    assert job.runs == [(forced_id, True)]
    assert record(first, forced_id)["trigger"] == "forced"
    assert record(first, scheduled_id) is None  # the scheduled run at that time is untouched

    again = instance(job).deliver(headers(time=time))  # Scheduler's retry, another instance
    assert (again.body["outcome"], again.body["trigger"], again.body["run_id"]) == (
        "duplicate_completed",
        "forced",
        forced_id,
    )
    assert len(job.runs) == 1


def test_a_scheduled_delivery_is_recorded_as_scheduled_for_two_rpcs(instance):
    job = Recorder()
    time = at(-timedelta(seconds=1))
    scheduled_id, _ = ids(time)
    first = instance(job)
    reply = first.deliver(headers(time=time))
    assert (reply.body["outcome"], reply.body["trigger"], reply.body["run_id"]) == (
        "executed",
        "scheduled",
        scheduled_id,
    )
    assert first.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}
    assert record(first, scheduled_id)["trigger"] == "scheduled"
    assert job.runs == [(scheduled_id, False)]


def test_a_delivery_within_the_tolerance_ahead_is_the_scheduled_run(instance):
    job = Recorder()
    # Ahead by less than the tolerance on any clock once the claim commits.
    time = at(FORCED_RUN_TOLERANCE - timedelta(seconds=2))
    reply = instance(job).deliver(headers(time=time))
    assert (reply.body["outcome"], reply.body["trigger"]) == ("executed", "scheduled")


def test_an_instance_clock_running_ahead_is_corrected_by_the_claims_commit_time(instance):
    """The instance takes a forced delivery for the scheduled run: its claim's commit time says
    otherwise, and the scheduled record is given back unrun before the forced run is claimed."""
    job = Recorder()
    time = at(timedelta(seconds=60))
    scheduled_id, forced_id = ids(time)
    ahead = instance(job, clock=FakeClock(SKEW))
    reply = ahead.deliver(headers(time=time))
    assert (reply.body["outcome"], reply.body["trigger"], reply.body["run_id"]) == (
        "executed",
        "forced",
        forced_id,
    )
    # create (scheduled), delete it, create (forced), complete: two more only when misjudged
    assert ahead.rpcs.snapshot() == {"BatchWrite": 2, "Commit": 2}
    assert record(ahead, scheduled_id) is None
    assert job.runs == [(forced_id, True)]


def test_an_instance_clock_running_behind_never_answers_the_scheduled_run_as_the_forced_ones_duplicate(
    instance, emulator_host, project
):
    """A forced run announcing T completed; at T a delivery reaches an instance whose clock is
    hours late, so it guesses "forced" and finds the forced run's record, and its own memory of
    it: the record's read time says T has passed, and the scheduled run runs."""
    job = Recorder()
    time = at(-timedelta(seconds=30))
    scheduled_id, forced_id = ids(time)
    behind = instance(job, clock=FakeClock(-SKEW))
    # What the forced run left: its record, completed, and this instance's memory of it.
    forced_key = run_key_from_headers(headers(time=time)).as_triggered(Trigger.FORCED)
    ledger = RunLedger(
        FirestoreRunStore(behind.client, "scheduler_runs"), lease=timedelta(seconds=70), retention=SKEW
    )
    ledger.complete(ledger.claim(forced_key, "the-forced-attempt"), output_json='{"forced": true}')
    behind.cache.remember(forced_id, "succeeded", '{"forced": true}', 600, fingerprint="")

    reply = behind.deliver(headers(time=time))
    assert (reply.body["outcome"], reply.body["trigger"], reply.body["run_id"]) == (
        "executed",
        "scheduled",
        scheduled_id,
    )
    # refused create (forced), its read, create (scheduled), complete
    assert behind.rpcs.snapshot() == {"BatchWrite": 2, "BatchGetDocuments": 1, "Commit": 1}
    assert job.runs == [(scheduled_id, False)]
    assert record(behind, forced_id)["attempt_id"] == "the-forced-attempt"  # left as it was


def test_an_instance_clock_running_behind_gives_back_a_forced_guess_for_a_scheduled_run(instance):
    job = Recorder()
    time = at(-timedelta(seconds=1))
    scheduled_id, forced_id = ids(time)
    behind = instance(job, clock=FakeClock(-SKEW))
    reply = behind.deliver(headers(time=time))
    assert (reply.body["outcome"], reply.body["trigger"], reply.body["run_id"]) == (
        "executed",
        "scheduled",
        scheduled_id,
    )
    assert record(behind, forced_id) is None
    assert job.runs == [(scheduled_id, False)]


# --- starting deadline ------------------------------------------------------------------------


def test_a_delivery_past_the_starting_deadline_is_recorded_skipped_late_and_never_run(instance):
    job = Recorder()
    time = at(-timedelta(minutes=10))
    scheduled_id, _ = ids(time)
    late = instance(job, starting_deadlines={"nightly": 60})
    reply = late.deliver(headers(time=time))
    assert (reply.status, reply.body["outcome"], reply.body["result"]) == (
        200,
        "skipped_late",
        "skipped_late",
    )
    assert "startingDeadlineSeconds (60s)" in reply.body["error"]
    assert late.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # claim, then the skipping write
    stored = record(late, scheduled_id)
    assert (stored["status"], stored["result"]) == ("completed", JobResult.SKIPPED_LATE.value)
    assert job.runs == []

    assert instance(job, starting_deadlines={"nightly": 60}).deliver(headers(time=time)).body["outcome"] == (
        "skipped_late"
    )
    assert late.deliver(headers(time=time)).body["outcome"] == "skipped_late"
    assert late.cost() == 0  # answered from memory
    assert job.runs == []


def test_lateness_is_judged_on_firestores_clock(instance):
    job = Recorder()
    on_time, too_late = at(-timedelta(seconds=10)), at(-timedelta(seconds=120))
    # Hours ahead, the instance would call every run late; hours behind, none.
    ahead = instance(job, clock=FakeClock(SKEW), starting_deadlines={"nightly": 60})
    assert ahead.deliver(headers(time=on_time)).body["outcome"] == "executed"
    behind = instance(job, clock=FakeClock(-SKEW), starting_deadlines={"nightly": 60})
    assert behind.deliver(headers(time=too_late)).body["outcome"] == "skipped_late"
    assert len(job.runs) == 1


def test_other_jobs_have_no_starting_deadline(instance):
    job = Recorder()
    reply = instance(job, starting_deadlines={"other": 60}).deliver(headers(time=at(-timedelta(days=1))))
    assert reply.body["outcome"] == "executed"
