"""exactly_once.testing.JobEnvironment: a job run as the function runs it, in memory, without
credentials; on the emulator when given its client."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from exactly_once import RetryableJobError, RunContext, firestore_client
from exactly_once.config import JobPolicy
from exactly_once.testing import JobEnvironment

NIGHT = datetime(2026, 11, 29, 2, tzinfo=UTC)


def staging(context: RunContext) -> dict[str, Any]:
    """Stages one document and returns what it was given and what it had before."""
    previous = context.previous()
    document = firestore_client().collection("reports").document(context.run_id)
    context.writes.set(document, {"body": context.json_body(), "schedule_time": context.schedule_time})
    return {
        "previous": previous.output if previous is not None else None,
        "resumed": context.last_checkpoint,
    }


def test_a_run_commits_its_staged_writes_and_answers_its_output(monkeypatch):
    # No credentials and no emulator: the job's client only names documents.
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/credentials.json")
    env = JobEnvironment(staging)
    done = env.run({"n": 1}, at=NIGHT, previous={"rows": 7})
    assert (done.outcome, done.output) == ("executed", {"previous": {"rows": 7}, "resumed": None})
    assert done.writes == {f"reports/{done.run_id}": {"body": {"n": 1}, "schedule_time": NIGHT}}
    assert env.document(f"reports/{done.run_id}") == done.writes[f"reports/{done.run_id}"]
    again = env.run({"n": 1}, at=NIGHT)
    assert (again.outcome, again.output) == ("duplicate_completed", done.output)


def test_a_checkpoint_is_inherited_and_a_failed_attempts_checkpoint_is_kept():
    attempts: list[Any] = []

    def paging(context: RunContext) -> int:
        attempts.append(context.last_checkpoint)
        context.checkpoint({"page": (context.last_checkpoint or {"page": 0})["page"] + 1})
        if len(attempts) == 1:
            raise RetryableJobError("page 2 timed out")
        return len(attempts)

    env = JobEnvironment(paging)
    first = env.run(at=NIGHT, checkpoint={"page": 4})
    assert (first.outcome, first.checkpoint) == ("failed_released", {"page": 5})
    retry = env.run(at=NIGHT)
    assert (retry.outcome, retry.output) == ("executed", 2)
    assert attempts == [{"page": 4}, {"page": 5}]


def test_a_job_that_reads_firestore_itself_in_memory_is_told_what_to_give_it():
    def reading(context: RunContext) -> Any:
        snapshot: Any = firestore_client().collection("reports").document("x").get()
        return snapshot.to_dict()

    done = JobEnvironment(reading).run(at=NIGHT)
    assert done.outcome == "failed_released"
    assert "FirestoreNeeded" in str(done.error) and "FIRESTORE_EMULATOR_HOST" in str(done.error)


def test_the_job_tables_entry_applies_a_paused_job_skips_its_runs():
    def failing(context: RunContext) -> None:
        raise RetryableJobError("downstream gone")

    env = JobEnvironment(failing, policy=JobPolicy(pause_after_failures=1))
    assert env.run(at=NIGHT).outcome == "failed_released"
    assert env.run(at=NIGHT.replace(hour=3)).outcome == "skipped_paused"


@pytest.mark.usefixtures("emulator_host")
def test_on_the_emulator_a_job_reads_what_an_earlier_run_committed(db):
    def counting(context: RunContext) -> int:
        counter = firestore_client().collection("counters").document("runs")
        seen: Any = counter.get()
        count = (seen.to_dict() or {}).get("n", 0) if seen.exists else 0
        context.writes.set(counter, {"n": count + 1})
        return int(count + 1)

    env = JobEnvironment(counting, client=db)
    assert [env.run(at=NIGHT.replace(hour=hour)).output for hour in (1, 2, 3)] == [1, 2, 3]
    assert db.collection("counters").document("runs").get().to_dict() == {"n": 3}
