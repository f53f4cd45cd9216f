"""A job longer than its lease keeps its run; one that overruns, or cannot renew, is ended
before anyone could take the run over. In-process on the Firestore emulator: the watchdog
records instead of ending the test's process (test_overrun_http.py ends real ones)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from exactly_once.config import RENEWALS_PER_LEASE, JobPolicy
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore
from localrun.firestore_rpcs import counted_emulator_client
from tests.function import sample_jobs
from tests.support.handler_harness import HEADERS, Harness
from tests.support.ledger_runs import KEY, ledger_on
from tests.support.waiting import wait_until

# Renewed every 2 s. Shorter leases give Firestore calls sub-second budgets (a ledger call may
# take half a lease, one attempt a third of that), too tight for a busy machine's emulator.
LEASE = timedelta(seconds=6)


def test_a_job_two_leases_long_keeps_its_run_and_renews_it(db):
    """While the job runs, every rival delivery is answered in_progress (never a takeover),
    and the finish matches the last renewal."""
    harness = Harness(db, "tests.function.sample_jobs:run_hook", lease=LEASE)
    rival = Harness(db, "tests.function.sample_jobs:record_call", lease=LEASE, name="rival")
    rival_outcomes: list[str] = []

    def long_job(context):
        ends = time.monotonic() + 2 * LEASE.total_seconds()
        while time.monotonic() < ends:
            rival_outcomes.append(rival.deliver().body["outcome"])
            time.sleep(0.3)

    sample_jobs.DURING_JOB = long_job
    reply = harness.deliver()

    assert (reply.status, reply.body["outcome"]) == (200, "executed")
    assert set(rival_outcomes) == {"in_progress"} and len(rival_outcomes) >= 5
    assert sample_jobs.CALLS == []  # the rival's job never ran
    executed = harness.log_lines()[-1]
    assert executed["renewals"] >= 2 * RENEWALS_PER_LEASE - 1
    (run,) = harness.runs()
    fields = run.to_dict()
    assert fields["status"] == "completed" and fields["renewed_at"] is not None
    assert harness.ended.reasons == []


def test_renewals_cost_one_commit_each_and_a_short_job_none(emulator_host, project):
    """2 RPCs for a job shorter than a third of its lease; one more per renewal beyond. The
    long job returns once two renewals have committed (counted on the wire, where the job
    itself makes no call); a third may follow before it returns, and is counted too."""
    client, rpcs = counted_emulator_client(emulator_host, project)
    harness = Harness(client, "tests.function.sample_jobs:run_hook", lease=LEASE)
    rpcs.reset()
    assert harness.deliver().body["outcome"] == "executed"
    assert rpcs.snapshot() == {"BatchWrite": 1, "Commit": 1}  # claim, complete

    def until_two_renewals(context):
        wait_until(lambda: rpcs.snapshot()["Commit"] >= 2, timeout=60, what="two renewals", interval=0.02)

    sample_jobs.DURING_JOB = until_two_renewals
    rpcs.reset()
    later = {**HEADERS, "x-cloudscheduler-scheduletime": "2026-10-16T13:00:00Z"}
    reply = harness.deliver(headers=later)
    renewals = harness.log_lines()[-1]["renewals"]
    assert reply.body["outcome"] == "executed" and renewals >= 2
    assert rpcs.snapshot() == {"BatchWrite": 1, "Commit": renewals + 1}  # claim, renewals, complete


def test_an_overrunning_job_is_ended_at_its_time_limit(db):
    harness = Harness(db, "tests.function.sample_jobs:run_hook", lease=LEASE, time_limit=1.5)
    seen: list[float] = []

    def overrun(context):
        seen.append(context.seconds_left())
        harness.ended.ended.wait(timeout=30)  # a real instance would be gone by now
        seen.append(context.seconds_left())

    sample_jobs.DURING_JOB = overrun
    harness.deliver()
    assert harness.ended.reasons == ["the attempt reached its time limit before the job returned"]
    assert 0 < seen[0] <= 1.5 and seen[1] == 0
    line = next(line for line in harness.log_lines() if line.get("event") == "attempt_ended")
    assert (line["severity"], line["run_id"]) == ("CRITICAL", KEY.run_id)


def test_a_job_with_a_limit_of_its_own_is_ended_at_it_and_the_others_keep_the_ceiling(db):
    """One function, two jobs: `nightly` may run 1.5 s (its job table entry), any other job the
    function's whole time limit."""
    harness = Harness(
        db,
        "tests.function.sample_jobs:run_hook",
        lease=LEASE,
        time_limit=60.0,
        jobs={"nightly": JobPolicy(time_limit_seconds=1.5)},
    )
    seen: dict[str, float] = {}

    def watch(context):
        seen[context.job_name] = context.seconds_left()
        if context.job_name == "nightly":
            harness.ended.ended.wait(timeout=30)

    sample_jobs.DURING_JOB = watch
    other = {**HEADERS, "x-cloudscheduler-jobname": "hourly"}
    assert harness.deliver(headers=other).body["outcome"] == "executed"
    assert harness.ended.reasons == [] and 1.5 < seen["hourly"] <= 60
    harness.deliver()
    assert harness.ended.reasons == ["the attempt reached its time limit before the job returned"]
    assert 0 < seen["nightly"] <= 1.5


def test_a_plain_run_context_has_no_time_limit():
    from exactly_once.context import RunContext

    context = RunContext(KEY.run_id, "nightly", KEY.schedule_time, "acme", "europe-west1", "a", 1, b"")
    assert context.seconds_left() == float("inf")


class LosesAnswers(FirestoreRunStore):
    """The real store, whose chosen write commits, loses its answer, and is sent again, as the
    client library does after a DEADLINE_EXCEEDED: the caller sees the repeat's answer."""

    def __init__(self, db, collection, lose) -> None:
        super().__init__(db, collection)
        self._lose = lose
        self.lost: list[str] = []

    def _once(self, what: str) -> bool:
        if self._lose(what) and not self.lost:
            self.lost.append(what)
            return True
        return False

    def update(self, run_id, fields, *, if_updated_at, timeout, also=()):
        update_time = super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)
        if self._once(next(iter(fields))):
            return super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)
        return update_time

    def delete(self, run_id, *, if_updated_at, timeout, also=()):
        super().delete(run_id, if_updated_at=if_updated_at, timeout=timeout, also=also)
        if self._once("delete"):
            super().delete(run_id, if_updated_at=if_updated_at, timeout=timeout, also=also)


def test_a_renewal_whose_answer_was_lost_still_lets_its_owner_finish(db):
    store = LosesAnswers(db, "scheduler_runs", lambda what: what == "renewed_at")
    harness = Harness(db, "tests.function.sample_jobs:run_hook", store=store, lease=LEASE)
    sample_jobs.DURING_JOB = lambda context: time.sleep(2.5 * LEASE.total_seconds() / RENEWALS_PER_LEASE)
    reply = harness.deliver()
    assert store.lost == ["renewed_at"]
    assert (reply.status, reply.body["outcome"]) == (200, "executed")
    assert harness.ended.reasons == []


def test_a_release_whose_answer_was_lost_is_a_release_not_a_lost_lease(db):
    store = LosesAnswers(db, "scheduler_runs", lambda what: what == "delete")
    harness = Harness(db, "tests.function.sample_jobs:fail_retryable", store=store)
    reply = harness.deliver()
    assert store.lost == ["delete"]
    assert (reply.status, reply.body["outcome"]) == (500, "failed_released")
    assert harness.runs() == []


def test_renewal_refused_after_a_takeover_raises_lease_lost(db):
    """The renewal is a compare-and-swap on the owner's last write: a stalled owner whose run
    was taken over cannot renew it back."""
    from exactly_once.ledger.protocol import LeaseLost

    # A lease long enough that its refused renewal's read of the record (a third of half a
    # lease: 1 s) is answered on a loaded machine; with 1 s, that read had a sixth of a second
    # and ran out before it could tell the takeover.
    ledger = ledger_on(db, lease=timedelta(seconds=6))
    stale = ledger.claim(KEY, "stalled")
    rival = ledger_on(db, lease=timedelta(seconds=6))
    fresh = wait_until(
        lambda: _claim_or_none(rival, "rival"), timeout=60, what="the lease to run out", interval=0.2
    )
    with pytest.raises(LeaseLost):
        ledger.renew(stale, timeout=5)
    renewed = rival.renew(fresh, timeout=5)
    assert renewed.fence == fresh.fence and renewed.update_time > fresh.update_time


def _claim_or_none(ledger: RunLedger, attempt_id: str):
    from exactly_once.ledger.protocol import RunInProgress

    try:
        return ledger.claim(KEY, attempt_id)
    except RunInProgress:
        return None


def test_the_lock_of_a_long_skip_job_holds_while_its_run_renews(emulator_host, project, db):
    """A `skip` job's lock is live as long as its run's lease: a second run arriving after
    the first run has renewed past its original lease is still skipped."""
    from exactly_once.config import OverlapPolicy
    from tests.support.instances import SECOND, Gate, Instance, hold_first_run

    gate = Gate()
    skip = {"nightly": OverlapPolicy.SKIP}
    first = Instance(emulator_host, project, gate, overlap=skip, lease=LEASE)
    holder = hold_first_run(first, gate)

    def renewed_past_its_first_lease() -> bool:
        fields = db.collection("scheduler_runs").document(KEY.run_id).get().to_dict() or {}
        renewed, claimed = fields.get("renewed_at"), fields.get("claimed_at")
        return bool(renewed and claimed and renewed - claimed > LEASE)

    wait_until(renewed_past_its_first_lease, timeout=30, what="the first run to outlive its first lease")
    second = Instance(emulator_host, project, gate, overlap=skip, lease=LEASE)
    skipped = second.deliver(SECOND)
    assert (skipped.status, skipped.body["outcome"]) == (200, "overlap_skipped")
    gate.finish.set()
    holder.join(timeout=30)
    assert len(gate.runs) == 1
