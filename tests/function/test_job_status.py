"""Each job's last result, kept in the commit that ends each run, and RunContext.previous(),
in-process on the emulator with the Firestore RPCs counted on the wire."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from exactly_once import RetryableJobError, TerminalJobError
from exactly_once.context import RunContext
from exactly_once.delivery.scheduler_request import run_key_from_headers
from exactly_once.ledger.fields import job_status_collection, job_status_id
from exactly_once.ledger.previous_run import PreviousRun
from exactly_once.run_key import Trigger, format_rfc3339
from tests.support.instances import Instance, headers

FIRST, SECOND, THIRD = "2026-10-16T12:00:00Z", "2026-10-16T12:15:00Z", "2026-10-16T12:30:00Z"


@pytest.fixture
def instance(emulator_host, project):
    return lambda job, **options: Instance(emulator_host, project, job, **options)


def status(instance: Instance, job: str = "nightly") -> Any:
    client: Any = instance.client
    document = client.collection(job_status_collection("scheduler_runs")).document(
        job_status_id("acme", "europe-west1", job)
    )
    snapshot = document.get()
    return snapshot.to_dict() if snapshot.exists else {}


def run_id(time: str) -> str:
    return run_key_from_headers(headers(time=time)).run_id


class Scripted:
    """A job that fails or succeeds as the test scripts it, run by run."""

    def __init__(self, *steps: object) -> None:
        self.steps = list(steps)

    def __call__(self, run: RunContext):
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


def test_a_success_is_recorded_in_the_completing_commit(instance):
    job = instance(Scripted({"rows": 3}))
    reply = job.deliver(headers(time=FIRST))
    assert reply.body["outcome"] == "executed"
    assert job.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # still two RPCs
    recorded = status(job)
    assert recorded["consecutive_failures"] == 0
    last = recorded["last_success"]
    assert (format_rfc3339(last["schedule_time"]), last["run_id"], last["trigger"]) == (
        FIRST,
        run_id(FIRST),
        "scheduled",
    )
    assert last["output_json"] == '{"rows":3}'
    assert isinstance(last["ended_at"], datetime)
    assert (recorded["job_name"], recorded["project"], recorded["location"]) == (
        "nightly",
        "acme",
        "europe-west1",
    )
    assert "last_failure" not in recorded


def test_failures_count_until_a_success_resets_them_and_the_last_of_each_stays(instance):
    job = instance(
        Scripted(
            RetryableJobError("downstream timed out"),
            TerminalJobError("downstream said 404"),
            {"rows": 1},
            RetryableJobError("flaky again"),
        )
    )
    assert job.deliver(headers(time=FIRST)).body["outcome"] == "failed_released"
    assert job.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # claim, release with the status
    after_release = status(job)
    assert after_release["consecutive_failures"] == 1
    assert "downstream timed out" in after_release["last_failure"]["reason"]
    assert after_release["last_failure"]["run_id"] == run_id(FIRST)

    assert job.deliver(headers(time=SECOND)).body["outcome"] == "failed_terminal"
    after_terminal = status(job)
    assert after_terminal["consecutive_failures"] == 2
    assert after_terminal["last_failure"]["reason"] == "downstream said 404"
    assert format_rfc3339(after_terminal["last_failure"]["schedule_time"]) == SECOND

    assert job.deliver(headers(time=FIRST)).body["outcome"] == "executed"  # the retry succeeds
    after_success = status(job)
    assert after_success["consecutive_failures"] == 0
    assert format_rfc3339(after_success["last_success"]["schedule_time"]) == FIRST
    assert after_success["last_failure"]["reason"] == "downstream said 404"  # kept

    assert job.deliver(headers(time=THIRD)).body["outcome"] == "failed_released"
    assert status(job)["consecutive_failures"] == 1


def test_failures_on_concurrent_instances_are_all_counted(instance):
    """The count is an Increment in each run's own commit: two instances failing runs at once
    cannot overwrite each other's count."""
    times = [f"2026-10-16T{hour:02d}:00:00Z" for hour in range(8)]
    instances = [instance(Scripted(*[TerminalJobError("no")] * 4)) for _ in range(2)]
    barrier = threading.Barrier(len(times))
    outcomes: list[str] = []

    def deliver(index: int) -> None:
        barrier.wait(timeout=30)
        outcomes.append(instances[index % 2].deliver(headers(time=times[index])).body["outcome"])

    threads = [threading.Thread(target=deliver, args=(index,)) for index in range(len(times))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outcomes == ["failed_terminal"] * len(times)
    assert status(instances[0])["consecutive_failures"] == len(times)


def test_skipped_and_duplicate_deliveries_leave_the_status_alone(instance):
    job = instance(Scripted({"rows": 3}), starting_deadlines={"nightly": 60})
    assert job.deliver(headers(time=FIRST)).body["outcome"] == "skipped_late"
    assert status(job) == {}
    fresh = instance(Scripted({"rows": 3}))
    assert fresh.deliver(headers(time=FIRST)).body["outcome"] == "skipped_late"  # from the record
    assert status(fresh) == {}


def test_previous_is_read_once_when_a_job_asks_and_never_when_it_does_not(instance):
    seen: list[PreviousRun | None] = []

    def asks(run: RunContext):
        seen.append(run.previous())
        seen.append(run.previous())  # asked twice: still one read
        return {"watermark": run.schedule_time.isoformat()}

    first = instance(asks)
    first.deliver(headers(time=FIRST))
    assert seen == [None, None]
    assert first.rpcs.snapshot() == {"BatchWrite": 1, "BatchGetDocuments": 1, "Commit": 1}

    seen.clear()
    second = instance(asks)
    second.deliver(headers(time=SECOND))
    assert (
        seen[0]
        == seen[1]
        == PreviousRun(
            schedule_time=datetime(2026, 10, 16, 12, tzinfo=UTC),
            output={"watermark": "2026-10-16T12:00:00+00:00"},
            run_id=run_id(FIRST),
            forced=False,
        )
    )
    assert second.rpcs.snapshot() == {"BatchWrite": 1, "BatchGetDocuments": 1, "Commit": 1}

    silent = instance(lambda run: None)
    silent.deliver(headers(time=THIRD))
    assert silent.rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}


def test_a_forced_runs_success_is_the_previous_run_and_says_so(instance):
    ahead = format_rfc3339(datetime.now(UTC).replace(microsecond=0, year=datetime.now(UTC).year + 1))
    seen: list[PreviousRun | None] = []
    instance(lambda run: {"forced": run.forced}).deliver(headers(time=ahead))
    instance(lambda run: seen.append(run.previous())).deliver(headers(time=FIRST))
    (previous,) = seen
    assert previous is not None and previous.forced and previous.output == {"forced": True}
    forced_id = run_key_from_headers(headers(time=ahead)).as_triggered(Trigger.FORCED).run_id
    assert previous.run_id == forced_id


def test_a_plain_context_has_no_previous_run_unless_a_test_gives_it_one():
    context = RunContext(
        run_id="r", job_name="j", schedule_time=datetime(2026, 1, 1, tzinfo=UTC), project="", location="",
        attempt_id="a", fence=1, body=b"",
    )  # fmt: skip
    assert context.previous() is None
    earlier = PreviousRun(datetime(2025, 12, 31, tzinfo=UTC), {"watermark": 7}, "q")
    given = RunContext(**{**context.__dict__, "previous_reader": lambda: earlier})
    assert given.previous() == earlier
