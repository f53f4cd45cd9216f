"""A job paused after pauseAfterFailures failed runs in a row: in-process on the emulator, with
the Firestore RPCs counted on the wire."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from exactly_once import RetryableJobError, TerminalJobError
from exactly_once.context import RunContext
from exactly_once.delivery.scheduler_request import run_key_from_headers
from exactly_once.ledger.fields import job_status_collection, job_status_id
from exactly_once.ledger.job_status import JobStatuses, resume_fields
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.run_key import Trigger, format_rfc3339
from tests.support.instances import Instance, headers

FIRST, SECOND, THIRD, FOURTH = (f"2026-10-16T12:{minute:02d}:00Z" for minute in (0, 15, 30, 45))


class Scripted:
    """A job that fails or succeeds as the test scripts it, call by call; counts its calls."""

    def __init__(self, *steps: object) -> None:
        self.steps = list(steps)
        self.calls: list[str] = []

    def __call__(self, run: RunContext) -> Any:
        self.calls.append(format_rfc3339(run.schedule_time))
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


@pytest.fixture
def instance(emulator_host, project):
    return lambda job, **options: Instance(emulator_host, project, job, **options)


def status(instance: Instance) -> dict[str, Any]:
    client: Any = instance.client
    snapshot = (
        client.collection(job_status_collection("scheduler_runs"))
        .document(job_status_id("acme", "europe-west1", "nightly"))
        .get()
    )
    return snapshot.to_dict() or {} if snapshot.exists else {}


def run_id(time: str) -> str:
    return run_key_from_headers(headers(time=time)).run_id


def record(instance: Instance, time: str) -> dict[str, Any]:
    client: Any = instance.client
    return client.collection("scheduler_runs").document(run_id(time)).get().to_dict() or {}


def pause_lines(instance: Instance) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in instance.logs.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "job_paused_after_failures"]


def test_two_failed_runs_pause_the_job_and_its_next_run_is_recorded_skipped_unrun(instance):
    job = Scripted(RetryableJobError("down"), RetryableJobError("still down"), TerminalJobError("gone"))
    paused = instance(job, pause_after_failures={"nightly": 2})

    # An unpaused run of a job with the key costs one read more than today's two RPCs.
    assert paused.deliver(headers(time=FIRST)).body["outcome"] == "failed_released"
    assert paused.rpcs.snapshot() == {"BatchWrite": 1, "BatchGetDocuments": 1, "Commit": 1}
    # The same run failing again counts once.
    assert paused.deliver(headers(time=FIRST)).body["outcome"] == "failed_released"
    assert status(paused)["failed_runs"] == [run_id(FIRST)]
    assert paused.deliver(headers(time=SECOND)).body["outcome"] == "failed_terminal"
    assert status(paused)["failed_runs"] == [run_id(FIRST), run_id(SECOND)]
    assert status(paused)["consecutive_failures"] == 3  # attempts, as before

    reply = paused.deliver(headers(time=THIRD))
    assert (reply.status, reply.body["outcome"]) == (200, "skipped_paused")
    assert "paused after 2 failed runs in a row" in reply.body["error"]
    # Claim, read, and the skip's completion, which records the pause in the same commit.
    assert paused.rpcs.snapshot() == {"BatchWrite": 1, "BatchGetDocuments": 1, "Commit": 1}
    assert job.calls == [FIRST, FIRST, SECOND]
    assert (record(paused, THIRD)["status"], record(paused, THIRD)["result"]) == (
        "completed",
        "skipped_paused",
    )
    recorded = status(paused)
    assert isinstance(recorded["failure_paused_at"], datetime)
    assert recorded["failure_paused_after"] == [run_id(FIRST), run_id(SECOND)]
    [line] = pause_lines(paused)
    assert (line["severity"], line["job"], line["failed_runs"]) == (
        "ERROR",
        "nightly",
        [run_id(FIRST), run_id(SECOND)],
    )

    # The next skip announces nothing again; a duplicate is answered from the warm cache.
    assert paused.deliver(headers(time=FOURTH)).body["outcome"] == "skipped_paused"
    assert paused.rpcs.snapshot() == {"BatchWrite": 1, "BatchGetDocuments": 1, "Commit": 1}
    assert paused.deliver(headers(time=FOURTH)).body["outcome"] == "skipped_paused"
    assert paused.cost() == 0
    assert len(pause_lines(paused)) == 1
    assert job.calls == [FIRST, FIRST, SECOND]


def test_a_failing_runs_own_retry_still_runs_and_its_success_ends_the_pause(instance):
    job = Scripted(RetryableJobError("down"), {"ok": True}, {"ok": True})
    paused = instance(job, pause_after_failures={"nightly": 1})
    assert paused.deliver(headers(time=FIRST)).body["outcome"] == "failed_released"
    assert paused.deliver(headers(time=SECOND)).body["outcome"] == "skipped_paused"
    assert paused.deliver(headers(time=FIRST)).body["outcome"] == "executed"  # the retry
    recorded = status(paused)
    assert (recorded["failed_runs"], recorded["failure_paused_at"], recorded["consecutive_failures"]) == (
        [],
        None,
        0,
    )
    assert paused.deliver(headers(time=THIRD)).body["outcome"] == "executed"
    assert job.calls == [FIRST, FIRST, THIRD]


def test_a_forced_run_of_a_paused_job_runs_and_its_success_ends_the_pause(instance):
    job = Scripted(TerminalJobError("bad"), {"ok": True}, {"ok": True})
    paused = instance(job, pause_after_failures={"nightly": 1})
    assert paused.deliver(headers(time=FIRST)).body["outcome"] == "failed_terminal"
    ahead = datetime.now(UTC) + timedelta(seconds=60)  # a forced run ahead of its ScheduleTime
    forced_headers = headers(time=format_rfc3339(ahead.replace(microsecond=0)))
    reply = paused.deliver(forced_headers)
    assert (reply.body["outcome"], reply.body["trigger"]) == ("executed", Trigger.FORCED.value)
    assert status(paused)["failed_runs"] == []
    assert paused.deliver(headers(time=SECOND)).body["outcome"] == "executed"


def test_a_resume_forgets_the_failed_runs_and_as_many_failures_pause_the_job_again(instance):
    job = Scripted(RetryableJobError("down"), RetryableJobError("down again"))
    paused = instance(job, pause_after_failures={"nightly": 1})
    assert paused.deliver(headers(time=FIRST)).body["outcome"] == "failed_released"
    assert paused.deliver(headers(time=SECOND)).body["outcome"] == "skipped_paused"
    statuses = JobStatuses(FirestoreRunStore(paused.client, "scheduler_runs"), "scheduler_runs")
    statuses.document_of("acme", "europe-west1", "nightly").set(resume_fields(), merge=True)
    assert status(paused)["failure_resumed_at"] is not None
    assert paused.deliver(headers(time=THIRD)).body["outcome"] == "failed_released"
    assert paused.deliver(headers(time=FOURTH)).body["outcome"] == "skipped_paused"
    assert len(pause_lines(paused)) == 2  # one per pause
    assert job.calls == [FIRST, THIRD]


def test_a_job_without_the_key_keeps_no_failed_runs_and_is_never_paused(instance):
    job = Scripted(*[RetryableJobError("down")] * 3)
    other = instance(job, pause_after_failures={"another-job": 1})
    for time in (FIRST, SECOND, THIRD):
        assert other.deliver(headers(time=time)).body["outcome"] == "failed_released"
        assert other.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # no read for this job
    assert "failed_runs" not in status(other)
    assert job.calls == [FIRST, SECOND, THIRD]
