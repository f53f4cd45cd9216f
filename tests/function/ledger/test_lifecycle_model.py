"""A model-based test of the run lifecycle and of a job's own state: the real ledger, forced-run
path, pause check, finisher and audit, driven step by step against the in-memory store, checked
after every step against a reference model.

Hypothesis's stateful testing draws sequences of steps:

- deliveries of the runs of two jobs (one every five minutes with a catch-up policy as long as
  the ledger's retention, one daily with a starting deadline): scheduled, claimed up to 5 s
  early, late, delivered again, forced ahead of their time, or caught up when an audit asked,
  each through `DeliveredRun` on an instance clock skewed by a chosen offset (it only guesses
  a forced run), to one of two instances (each with its own ledger, which remembers its own
  claims given up unanswered), and none later than Cloud Scheduler's retries come (well inside
  the retention);
- each instance's function as deployed with a job table: the jobs it pauses after
  pauseAfterFailures failed runs in a row (`often` after 1 to 3 at first, one instance maybe
  still on a table without the key), changed by deploys to one instance at a time (the limit
  raised or lowered, the key removed and put back). A claimed run goes through the pause check
  as the handler makes it (FailurePauses.decide in RunFinisher.decided: one read of the job's
  status, a skip committed with the status's write conditioned on that read). `ops resume`
  merges its fields into a paused job's status, and at any moment between a skip's read and
  its commit, where another run's end may land too;
- the steps of the attempts those deliveries start: save a checkpoint, renew, succeed (with a
  staged write incrementing a counter document of the run), fail retryably or terminally,
  crash, freeze (no heartbeat and no watchdog until its next step, which thaws it); each run
  ends through the delivery's own RunFinisher, the job's status riding in that commit as the
  attempt's instance serves the job;
- faults: on an attempt's own write or a delivery's claim, or on the store's next call of an
  operation: a lost answer, no answer, Firestore unavailable, an answer seconds late (past the
  store deadline for a claim: ClaimTooLate), and a rival delivery of the same run claiming
  right after the write reached the store (inside a lost answer's window); on a skip's commit,
  a lost answer, no answer or a late one;
- time passing on the store's clock, a third of a lease at a time: each running attempt's
  heartbeat renews its lease, and its watchdog ends it at its time limit or when no renewal
  was confirmed in time (the clock moves inside slow calls too);
- time passing to just past the retention of a completed record, and Firestore's TTL deleting
  the completed records past their `expire_at` (an unfinished record's `expire_at` is on its
  claimer's clock, which the model skews by hours: its TTL is not modelled);
- pauses and resumes of a job (while paused, Cloud Scheduler delivers none of its runs), and
  audits (`exactly_once.audit.run.run_audit`, its horizon the store's now, its previous output kept).

Single-threaded: every interleaving is one drawn sequence, and a failure prints the shortest
one found, step by step, with the model's narration of what each step did.

The reference models (tests/support/lifecycle_model.py for runs, tests/support/job_state_model.py
for jobs) learn what really committed from the store's journal and judge it by their own rules.
The invariants, checked after every step:

1. No run's job is executed by two attempts whose leases overlap, and a run that completed is
   never executed again: every execution starts on a live lease of its own, after every other
   execution of the run has stopped or lost its lease, and never on a completed run.
2. The staged writes of a run are applied exactly once if the run completed with success (by
   the attempt that completed it), and never otherwise.
3. No run is lost while it can still be retried: a run not completed is always claimable by a
   later delivery once leases have lapsed (absent, released or lapsed), never stuck.
4. A checkpoint is never lost nor overwritten by a stale holder: while a run is unfinished its
   record holds the latest checkpoint saved by an attempt that held the run's live lease and
   reached the store with it (a renewal or a release), or the one inherited after a give-back,
   an attempt taking the run over resumes from it, and a completed run holds none.
5. Every run whose retry window closed is judged exactly once across audits (completed, failed,
   skipped late, paused or missed, as the ledger says; a gap between audits longer than their
   lookback leaves runs unjudged), a run judged missed that a delivery would claim is delivered
   by catch-up when its job has a catch-up policy, and a completed run never is, its record
   gone to the TTL or not (one claimed seconds before its ScheduleTime included).
6. A forced run never consumes the scheduled run: it runs under an identity of its own when it
   reaches Firestore more than 5 s ahead of the time it carries, its only writes to the
   scheduled run's record are a wrong guess's claim and the give-back that restores it, and the
   scheduled run still executes at its time (never claimed to run more than 5 s before it).
7. A run skipped because its job was paused is never delivered by catch-up nor reported missed,
   after the job resumes or before.
8. An attempt is answered `lease_lost` (LeaseLost) only if another attempt really took the run
   over under it; or, as `lifecycle.after_refusal` documents, when its release committed but
   the next claim came within a second of its lease's end or later (a frozen attempt's), so
   that no record can tell that claim from a takeover.
9. Each pause a skip's commit records (its `failure_paused_after`) is announced by at most one
   `job_paused_after_failures` line, and by exactly one when that skip's delivery was answered
   that it committed, its answer lost or not.
10. No run is recorded `skipped_paused` by a commit that came after a success or a resume of its
    job committed since the skip's decision read the job's status: that read must still stand.
11. No run is skipped because of failures that a success (or a resume) already ended, whatever
    the job table of the instance that delivered that success: a skip stands on the runs failed
    in a row since, as many as the deciding instance's pauseAfterFailures.

Profiles (LIFECYCLE_MODEL_PROFILE): `ci` (the default, what `make test` runs) draws a fixed
sequence of five hundred examples of up to eighty steps (derandomized: long enough for a job to
fail, pause and be resumed within one), once per `make test`: on the runtime's Python
(`make test-runtime`), not again in the 3.11 run, since the lifecycle is pure logic that both
Pythons run alike and a second pass costs every push a minute and a half of CI; `soak`
(`make soak-model`, any Python) draws thousands from a random seed it prints
(LIFECYCLE_MODEL_SEED=<seed> replays one).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import random
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as google_exceptions
from google.cloud import firestore
from hypothesis import HealthCheck, note, seed, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from exactly_once import log_fields
from exactly_once.audit.config import AuditConfig, AuditedJob
from exactly_once.audit.run import run_audit
from exactly_once.context import Progress, RunContext
from exactly_once.delivery.endings import Ending, GiveBack, Ran, Skip
from exactly_once.delivery.failure_pause import FailurePauses
from exactly_once.delivery.finishing import RunFinisher
from exactly_once.delivery.forced_runs import DeliveredRun
from exactly_once.delivery.heartbeat import give_up_at
from exactly_once.delivery.outcomes import Outcome
from exactly_once.delivery.report import DeliveryReport
from exactly_once.delivery.warm_cache import CompletedRuns
from exactly_once.errors import TerminalJobError
from exactly_once.ledger.fields import EXPIRE_AT
from exactly_once.ledger.job_status import JobStatuses, resume_fields
from exactly_once.ledger.lifecycle import STATUS, Status
from exactly_once.ledger.previous_run import PreviousRun
from exactly_once.ledger.protocol import (
    Claim,
    ClaimTooLate,
    JobResult,
    LeaseLost,
    RunAlreadyCompleted,
    RunInProgress,
    RunLedger,
)
from exactly_once.ledger.writes import StagedWrite, WriteKind
from exactly_once.run_key import RunKey, Trigger
from exactly_once.testing.memory_store import (
    LOST_ANSWER,
    NO_ANSWER,
    SLOW,
    UNAVAILABLE,
    AppliedWrite,
    MemoryRunStore,
    Operation,
    ServerClock,
    offline_client,
    stored_record_reader,
)
from tests.support.job_state_model import JobStates
from tests.support.lifecycle_model import (
    EFFECTS,
    GIVE_UP_SHARE,
    JOBS,
    LATEST_DELIVERY,
    LEASE,
    LOCATION,
    OFTEN,
    PROJECT,
    RETENTION,
    RUNS,
    TARGET,
    Acting,
    Attempt,
    Life,
    Op,
    Outside,
    Pause,
    Reference,
    RunStatus,
    at,
    label,
    run_key,
)

START = datetime(2026, 10, 16, 11, 58, tzinfo=UTC)
INSTANCES = 2
AUDIT_RUN_ID = "audit-run"
FINGERPRINT = "0" * 64
FAULTS = {
    "lost answer": LOST_ANSWER,
    "no answer": NO_ANSWER,
    "unavailable": UNAVAILABLE,
    "slow 4s": SLOW(4),
    "slow 9s": SLOW(9),
    "slow 12s": SLOW(12),
    "slow 45s": SLOW(45),
}
# What an attempt's own write may meet (the first, `none`, is what a failing sequence shrinks
# to); `+ rival`: another delivery of the run claims right after the write reached the store.
WRITE_FAULTS = (
    "none",
    "none",
    "none",
    "lost answer",
    "lost answer + rival",
    "no answer",
    "no answer + rival",
    "unavailable",
    "slow 12s",
    "slow 45s",
)
# What a delivery's claim may meet on the write that makes it (the create, or the update that
# takes a lapsed or released record over): `slow 12s` is past the store deadline (ClaimTooLate).
CLAIM_FAULTS = (
    "none",
    "none",
    "none",
    "slow 12s",
    "slow 9s",
    "lost answer",
    "lost answer + rival",
    "no answer",
    "unavailable",
)
# What may come between a paused job's decision (its read of the job's status) and its skip's
# commit: a fault on that commit (the UPDATE that completes the run), a write of the job's
# status landing first (`ops resume`, another run of the job ending), or both.
BETWEEN = (
    "lost answer",
    "no answer",
    "slow 45s",
    "ops resume",
    "ops resume + lost answer",
    "a run of the job succeeds",
    "a run of the job fails",
)
# The pauseAfterFailures a deploy may give a job (None: the key removed).
LIMITS = (None, 1, 2, 3)
# How far an instance's clock is off Firestore's, in seconds: it only guesses a forced run.
SKEWS = (0, 0, 3, -20, 20, -400, 400, -7200, 7200)
SECONDS = (1, 4, 11, 25, 31, 45, 90, 240, 700, 1900)
# An attempt's time limit (from its delivery), and how often its heartbeat renews its lease.
TIME_LIMIT = timedelta(minutes=5)
HEARTBEAT = LEASE / 3

PROFILE = os.environ.get("LIFECYCLE_MODEL_PROFILE", "ci")
pytestmark = pytest.mark.skipif(
    PROFILE == "ci" and sys.version_info < (3, 12),
    reason="make test runs the model once, on the runtime's Python (make test-runtime)",
)
MAX_SHRINKS = 20_000
_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
settings.register_profile(
    "lifecycle-ci",
    derandomize=True,
    database=None,
    max_examples=500,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=_HEALTH,
)
settings.register_profile(
    "lifecycle-soak",
    max_examples=4000,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=_HEALTH,
    print_blob=True,
)


@dataclass(frozen=True)
class Serving:
    """An instance's function as deployed: its job table's pauseAfterFailures by job, and the
    pieces of the delivery path built on it as ScheduledRunHandler builds them (the finisher,
    the pause check when some job pauses), logging to `log`."""

    limits: Mapping[str, int]
    statuses: JobStatuses
    finisher: RunFinisher
    pauses: FailurePauses | None
    log: io.StringIO


class LifecycleModel(RuleBasedStateMachine):
    """The system under test and the reference model, one step at a time."""

    attempts = Bundle("attempt")

    def __init__(self) -> None:
        super().__init__()
        self.clock = ServerClock(START)
        self.store = MemoryRunStore(RUNS, clock=self.clock)
        self.client = offline_client()
        self.model = Reference(START)
        # One ledger per function instance: each remembers its own claims given up unanswered.
        self.ledgers = [
            RunLedger(
                self.store,
                lease=LEASE,
                retention=RETENTION,
                clock=self.clock.now,
                monotonic=self.clock.monotonic,
            )
            for _ in range(INSTANCES)
        ]
        self.logs: list[io.StringIO] = []  # every deployed function's log lines
        self.serving = [self._deployed(instance, {}) for instance in range(INSTANCES)]
        self.served: dict[str, Serving] = {}  # by attempt: the function as its instance served it
        self.jobs = JobStates()
        self.between: list[str] = []  # what the next skips meet before they commit (BETWEEN)
        self.acting: list[Acting | Outside] = []
        self.store.observe(self._journal)
        self.announced: list[tuple[RunKey, str]] = []  # every delivery's ScheduleTime, and how
        self.catchups: list[RunKey] = []  # runs the audit handed over, not delivered yet
        self.rivals: list[Attempt] = []  # attempts a rival delivery started inside a fault
        self.numbers = itertools.count()
        self.previous: PreviousRun | None = None  # the last completed audit's run
        self.last_audit: datetime | None = None  # when the last audit ran, completed or not

    # ---- plumbing ---------------------------------------------------------------------

    def _journal(self, applied: Sequence[AppliedWrite]) -> None:
        acting = self.acting[-1] if self.acting else None
        self.model.committed(applied, acting)
        self.jobs.committed(applied, acting)

    def _deployed(self, instance: int, limits: Mapping[str, int]) -> Serving:
        """`instance`'s function deployed with a job table giving `limits` pauseAfterFailures."""
        ledger, log = self.ledgers[instance], io.StringIO()
        self.logs.append(log)
        statuses = JobStatuses(self.store, RUNS, limits)
        pauses = FailurePauses(statuses, ledger.deadline_seconds, log) if limits else None
        return Serving(
            dict(limits), statuses, RunFinisher(ledger, CompletedRuns(), statuses, log), pauses, log
        )

    def _pause_lines(self) -> list[dict[str, Any]]:
        lines = [json.loads(text) for log in self.logs for text in log.getvalue().splitlines()]
        return [line for line in lines if line.get(log_fields.EVENT) == log_fields.JOB_PAUSED_AFTER_FAILURES]

    @contextlib.contextmanager
    def _as(self, acting: Acting | Outside) -> Iterator[None]:
        self.acting.append(acting)
        try:
            yield
        finally:
            self.acting.pop()

    def _now(self) -> datetime:
        return self.clock.now()

    def _thaw(self, attempt: Attempt) -> None:
        if attempt.life is Life.FROZEN:
            attempt.life = Life.RUNNING
            note(f"{attempt.id} thaws at {at(self._now())}")

    def _end(self, attempt: Attempt, why: str, moment: datetime | None = None) -> None:
        attempt.life, attempt.ended = Life.ENDED, why
        self.model.stop_execution(attempt, moment or self._now())

    def _watchdog(self) -> None:
        """End each running attempt whose time limit, or whose lease's give-up point with no
        renewal confirmed, has passed (at that moment): the clock moves in steps, and inside
        store calls too (a slow answer, a claim's retries), while every other attempt's
        watchdog runs on. A frozen attempt's watchdog is frozen with it."""
        now = self._now()
        for attempt in self._running():
            end = min(self._give_up_at(attempt), attempt.ends_at)
            if end <= now:
                why = "its time limit" if attempt.ends_at <= end else "no renewal confirmed"
                note(f"{attempt.id}'s watchdog ended it at {at(end)}: {why}")
                self._end(attempt, "watchdog", end)

    def _give_up_at(self, attempt: Attempt) -> datetime:
        """When the watchdog ends the attempt unless a renewal is confirmed first."""
        give_up = attempt.claim.sent_at + LEASE.total_seconds() * GIVE_UP_SHARE
        return self._now() + timedelta(seconds=give_up - self.clock.monotonic())

    # ---- deliveries ---------------------------------------------------------------------

    def _deliver(
        self, key: RunKey, instance: int, skew: int, how: str, fault: str = "none"
    ) -> Attempt | None:
        """One delivery of `key` (as Cloud Scheduler's headers carry it) to `instance`, whose
        clock is `skew` seconds off: claim as the handler does, then run the job or skip it.
        `fault` is what the write that makes the claim meets. No delivery of a run comes
        LATEST_DELIVERY or later after its ScheduleTime (the retention outlives retries)."""
        self._watchdog()
        now = self._now()
        if now - key.schedule_time >= LATEST_DELIVERY:
            return None
        attempt = Attempt(f"a{next(self.numbers)}", instance, key, how)
        self.model.attempts[attempt.id] = attempt
        self.served[attempt.id] = self.serving[instance]
        self.model.run(key.as_triggered(Trigger.SCHEDULED))
        self.model.run(key.as_triggered(Trigger.FORCED))
        self.announced.append((key, how))
        delivered = DeliveredRun(key, now + timedelta(seconds=skew))
        guessed = self.model.run(delivered.key)
        takes_over = guessed.status is RunStatus.RELEASED or (
            guessed.status is RunStatus.IN_PROGRESS and not guessed.leased_at(now)
        )
        self._script_write(Operation.UPDATE if takes_over else Operation.CREATE, fault)
        what = (
            f"{attempt.id} ({how}, instance {instance}, clock {skew:+d}s) delivered {label(key)} at {at(now)}"
        )
        try:
            with self._as(Acting(attempt, Op.CLAIM)):
                ledger = self.ledgers[instance]
                claim = delivered.claim(
                    ledger, attempt.id, fingerprint=FINGERPRINT, target=TARGET, give_back=unrun(ledger)
                )
        except RunAlreadyCompleted:
            settled = self.model.run(delivered.key)
            note(f"{what}: {label(delivered.key)} already completed")
            if settled.status is not RunStatus.COMPLETED:
                self.model.violation(
                    3, f"{what}: refused as completed, but {label(delivered.key)} is {settled.status}"
                )
            return None
        except RunInProgress as busy:
            note(f"{what}: {label(delivered.key)} in progress ({busy.holder} holds it)")
            return None
        except ClaimTooLate:
            note(f"{what}: the claim of {label(delivered.key)} was confirmed too late and given back")
            return None
        except google_exceptions.GoogleAPIError as error:
            attempt.abandoned = True
            attempt.life, attempt.ended = Life.ENDED, "store error"
            note(f"{what}: the claim of {label(delivered.key)} failed ({type(error).__name__})")
            return None
        self._watchdog()
        attempt.key, attempt.claim, attempt.renewed = delivered.key, claim, claim.checkpoint_json
        run = self.model.run(delivered.key)
        note(
            f"{what}: claimed {label(delivered.key)} ({claim.kind}, committed {at(claim.update_time)}, "
            f"resuming from {claim.checkpoint_json})"
        )
        if run.owner != attempt.id or run.status is not RunStatus.IN_PROGRESS:
            self.model.violation(
                1, f"{attempt.id} was told it owns {label(delivered.key)}, {run.status} as {run.owner}'s"
            )
        if claim.checkpoint_json != attempt.inherited.get(run.key.run_id):
            self.model.violation(
                4,
                f"{attempt.id} resumes {label(delivered.key)} from {claim.checkpoint_json}, "
                f"not from {attempt.inherited.get(run.key.run_id)}",
            )
        self._check_identity(attempt, key, now, claim.update_time)
        job = JOBS[key.job_name]
        lateness = claim.update_time - delivered.key.schedule_time
        if job.starting_deadline is not None and lateness > job.starting_deadline:
            note(f"{attempt.id} is {lateness.total_seconds():.0f}s late: skips {label(delivered.key)}")
            self._finish(attempt, Op.COMPLETE, JobResult.SKIPPED_LATE)
            return None
        if self._held_back(attempt) or self._given_up(attempt):
            return None
        self.model.start_execution(attempt, self._now())
        attempt.ends_at = now + TIME_LIMIT
        return attempt

    def _held_back(self, attempt: Attempt) -> bool:
        """The pause check the handler makes next, as it makes it: RunFinisher.decided on
        FailurePauses.decide (one read of the job's status; a skip commits with the status's
        write conditioned on that read, and is decided again when refused). Whether it ended the
        attempt: the run skipped, given back, or its lease lost."""
        serving = self.served[attempt.id]
        pauses, key, claim = serving.pauses, claim_key(attempt), attempt.claim
        if pauses is None:
            return False

        def decide() -> Ending | None:
            self.jobs.decides(attempt.id, key.job_name)
            ending = pauses.decide(key, claim)
            if isinstance(ending, Skip):
                self._before_skip_commits(attempt)
            return ending

        report = DeliveryReport()
        acting = Acting(attempt, Op.DECIDE, result=JobResult.SKIPPED_PAUSED, limits=serving.limits)
        with self._as(acting):
            answer = serving.finisher.decided(key, claim, decide, report)
        if answer is None:
            return False
        if answer.outcome is Outcome.LEASE_LOST:
            self._lease_lost(attempt, "skip")
            return True
        note(
            f"{attempt.id}'s pause check of {label(key)}: {answer.outcome} ({answer.error or answer.message})"
        )
        self._end(attempt, str(answer.outcome))
        if answer.outcome is not Outcome.SKIPPED_PAUSED:
            return True
        self.jobs.answered_skipped(attempt.id, key.run_id)
        if (key.run_id, Op.COMPLETE) not in attempt.committed:
            self.model.violation(2, f"{attempt.id} was answered skipped, but no completion of its applied")
        return True

    def _given_up(self, attempt: Attempt) -> bool:
        """The handler's last check before the job, as it makes it: a pause check answered past
        the lease's give-up point gives the run back unrun, since it may be another attempt's."""
        claim = attempt.claim
        if self.clock.monotonic() < give_up_at(claim, LEASE.total_seconds()):
            return False
        serving = self.served[attempt.id]
        late = GiveBack(Outcome.STORE_ERROR, "the checks before the job answered past the give-up point")
        with self._as(Acting(attempt, Op.DECIDE, limits=serving.limits)):
            answer = serving.finisher.end(claim_key(attempt), claim, late, DeliveryReport())
        note(f"{attempt.id} is past its give-up point before the job: {answer.outcome}")
        if answer.outcome is Outcome.LEASE_LOST:
            self._lease_lost(attempt, "give back")
        else:
            self._end(attempt, str(answer.outcome))
        return True

    def _before_skip_commits(self, attempt: Attempt) -> None:
        """What the next skip meets before it commits (`between_read_and_skip`), placed on the
        UPDATE that completes its run: behind any script armed earlier, as the store takes
        scripts in order."""
        if not self.between:
            return
        parts = self.between.pop(0).split(" + ")
        fault = next((FAULTS[part] for part in parts if part in FAULTS), None)
        meanwhile = next((part for part in parts if part not in FAULTS), None)
        hook = (lambda: self._meanwhile(meanwhile, attempt)) if meanwhile is not None else None
        self.store.script(Operation.UPDATE, fault, before=hook)

    def _meanwhile(self, what: str, skipping: Attempt) -> None:
        """A write of the job's status lands between `skipping`'s decision and its commit: a
        resume, or the end of another running attempt of the job (none with a call in flight)."""
        job = claim_key(skipping).job_name
        note(f"between {skipping.id}'s read of {job}'s status and its skip's commit: {what}")
        if what == "ops resume":
            self._resume(job)
            return
        calling = {acting.attempt.id for acting in self.acting if isinstance(acting, Acting)}
        others = [
            attempt
            for attempt in self._running()
            if attempt.id not in calling and claim_key(attempt).job_name == job
        ]
        if not others:
            note(f"no other run of {job} is running")
        elif what.endswith("succeeds"):
            self._finish(others[0], Op.COMPLETE, JobResult.SUCCEEDED)
        else:
            self._finish(others[0], Op.RELEASE)

    def _check_identity(
        self, attempt: Attempt, key: RunKey, delivered_at: datetime, committed: datetime
    ) -> None:
        """Invariant 6: a delivery runs as forced only when it reached Firestore more than 5 s
        ahead of its time, and the scheduled run only when its own claim did not; a forced
        run's only writes to the scheduled run's record are a wrong guess's claim and its
        give-back (a give-back that failed leaves the unrun claim to lapse)."""
        assert attempt.key is not None
        ahead = key.schedule_time - delivered_at
        if attempt.key.forced and ahead <= timedelta(seconds=5):
            self.model.violation(
                6, f"{attempt.id} runs {label(attempt.key)}, delivered only {ahead} ahead of its time"
            )
        if not attempt.key.forced and key.schedule_time - committed > timedelta(seconds=5):
            self.model.violation(
                6,
                f"{attempt.id} runs {label(attempt.key)} though its claim committed at {at(committed)}, "
                "more than 5 s ahead of it",
            )
        if attempt.key.forced:
            scheduled = key.as_triggered(Trigger.SCHEDULED)
            writes = [op for run_id, op in attempt.committed if run_id == scheduled.run_id]
            if writes not in ([], [Op.CLAIM], [Op.CLAIM, Op.RELEASE]):
                self.model.violation(
                    6, f"forced {attempt.id} wrote {label(scheduled)}: {[str(op) for op in writes]}"
                )

    def _fires(self, job: str) -> list[datetime]:
        """The job's fire times so far that Cloud Scheduler delivered (none inside a pause)."""
        fires = JOBS[job].fires(START, self._now())
        return [moment for moment in fires if not self.model.in_pause(job, moment)]

    @rule(
        target=attempts,
        job=st.sampled_from(sorted(JOBS)),
        runs_back=st.sampled_from((0, 0, 0, 1, 2, 5, 15, 40)),
        instance=st.integers(0, INSTANCES - 1),
        skew=st.sampled_from(SKEWS),
        fault=st.sampled_from(CLAIM_FAULTS),
    )
    def deliver(self, job: str, runs_back: int, instance: int, skew: int, fault: str) -> Any:
        """Cloud Scheduler delivers one of the job's runs: the latest, or one `runs_back` fires
        back (late, for the daily job past its starting deadline)."""
        fires = self._fires(job)
        if self.model.paused(job) or not fires:
            return multiple()
        moment = fires[-1 - min(runs_back, len(fires) - 1)]
        how = "scheduled" if runs_back == 0 else "late"
        return self._deliver(run_key(job, moment), instance, skew, how, fault) or multiple()

    @precondition(lambda self: bool(self.announced))
    @rule(
        target=attempts,
        latest=st.integers(0, 3),
        instance=st.integers(0, INSTANCES - 1),
        skew=st.sampled_from(SKEWS),
        fault=st.sampled_from(CLAIM_FAULTS),
    )
    def redeliver(self, latest: int, instance: int, skew: int, fault: str) -> Any:
        """A duplicate: another delivery of the `latest`-th most recent delivery's run (Cloud
        Scheduler's retry, or a delivery it sent twice)."""
        key, _ = self.announced[-1 - min(latest, len(self.announced) - 1)]
        if self.model.paused(key.job_name) or self.model.in_pause(key.job_name, key.schedule_time):
            return multiple()
        return self._deliver(key, instance, skew, "redelivered", fault) or multiple()

    @rule(
        target=attempts,
        job=st.sampled_from(sorted(JOBS)),
        instance=st.integers(0, INSTANCES - 1),
        skew=st.sampled_from(SKEWS),
        fault=st.sampled_from(CLAIM_FAULTS),
    )
    def force(self, job: str, instance: int, skew: int, fault: str) -> Any:
        """A run forced by hand: delivered now, carrying the job's next ScheduleTime."""
        if self.model.paused(job):
            return multiple()
        key = run_key(job, JOBS[job].next_fire(self._now()))
        return self._deliver(key, instance, skew, "forced", fault) or multiple()

    @precondition(lambda self: bool(self.catchups))
    @rule(
        target=attempts,
        oldest=st.integers(0, 2),
        instance=st.integers(0, INSTANCES - 1),
        skew=st.sampled_from(SKEWS),
        fault=st.sampled_from(CLAIM_FAULTS),
    )
    def deliver_caught_up(self, oldest: int, instance: int, skew: int, fault: str) -> Any:
        """A run the audit handed over for catch-up arrives."""
        key = self.catchups.pop(min(oldest, len(self.catchups) - 1))
        return self._deliver(key, instance, skew, "caught up", fault) or multiple()

    @precondition(lambda self: bool(self.rivals))
    @rule(target=attempts)
    def adopt_rival(self) -> Attempt:
        """The attempt a rival delivery started inside a fault, from now on stepped like any."""
        return self.rivals.pop(0)

    def _rival(self) -> None:
        """A rival delivery of the run whose call is in flight, landing between its first try
        and its retry (a store script's `after` hook)."""
        acting = self.acting[-1] if self.acting else None
        if not isinstance(acting, Acting):
            return
        attempt = acting.attempt
        rival = self._deliver(attempt.announced, (attempt.instance + 1) % INSTANCES, 0, "rival")
        if rival is not None:
            self.rivals.append(rival)

    # ---- running attempts ----------------------------------------------------------------

    @rule(attempt=attempts)
    def checkpoint(self, attempt: Attempt) -> None:
        """The job saves how far it got (the next renewal or a release carries it)."""
        self._watchdog()
        if not attempt.alive:
            return
        if attempt.life is Life.FROZEN:
            self._thaw(attempt)
            self._watchdog()  # as it thaws, past its give-up point
            if not attempt.alive:
                return
        attempt.saved.append(attempt.next_checkpoint())
        note(f"{attempt.id} saves checkpoint {attempt.saved[-1]}")

    @rule(attempt=attempts, fault=st.sampled_from(WRITE_FAULTS))
    def renew(self, attempt: Attempt, fault: str) -> None:
        """The heartbeat renews the lease now, carrying the latest checkpoint when it changed."""
        self._watchdog()
        if attempt.alive:
            self._thaw(attempt)
            self._script_write(Operation.UPDATE, fault)
            self._renew(attempt, quiet=False)
            self._watchdog()

    def _renew(self, attempt: Attempt, *, quiet: bool) -> None:
        """One renewal, as the LeaseKeeper sends it."""
        latest = attempt.latest()
        carried = latest if latest != attempt.renewed else None
        ledger = self.ledgers[attempt.instance]
        before = len(attempt.committed)
        try:
            with self._as(Acting(attempt, Op.RENEW, carried=carried)):
                claim = ledger.renew(attempt.claim, timeout=ledger.deadline_seconds, checkpoint_json=carried)
        except LeaseLost:
            self._lease_lost(attempt, "renewal")
            return
        except google_exceptions.GoogleAPIError as error:
            note(f"{attempt.id}'s renewal failed ({type(error).__name__}): it keeps its lease as it was")
            return
        attempt.claim = claim
        if carried is not None:
            attempt.renewed = carried
        if not quiet or carried is not None:
            note(
                f"{attempt.id} renewed {label(claim_key(attempt))} until {at(claim.lease_expires)} "
                f"carrying {carried}"
            )
        if (attempt.run_id, Op.RENEW) not in attempt.committed[before:]:
            self.model.violation(4, f"{attempt.id}'s renewal was answered, but none of its writes applied")

    @rule(attempt=consumes(attempts), fault=st.sampled_from(WRITE_FAULTS))
    def succeed(self, attempt: Attempt, fault: str) -> None:
        """The job returns: complete the run, its staged write riding in the same commit."""
        self._finish(attempt, Op.COMPLETE, JobResult.SUCCEEDED, fault)

    @rule(attempt=consumes(attempts), fault=st.sampled_from(WRITE_FAULTS))
    def fail_retryably(self, attempt: Attempt, fault: str) -> None:
        """The job raises: release the run with its latest checkpoint for the next retry."""
        self._finish(attempt, Op.RELEASE, None, fault)

    @rule(attempt=consumes(attempts), fault=st.sampled_from(WRITE_FAULTS))
    def fail_terminally(self, attempt: Attempt, fault: str) -> None:
        """The job fails for good: complete the run as a terminal failure."""
        self._finish(attempt, Op.COMPLETE, JobResult.TERMINAL_FAILURE, fault)

    @rule(attempt=consumes(attempts))
    def crash(self, attempt: Attempt) -> None:
        """The instance dies: the attempt vanishes without a write."""
        if attempt.alive:
            note(f"{attempt.id} crashes at {at(self._now())}")
            self._end(attempt, "crashed")

    @rule(attempt=attempts)
    def freeze(self, attempt: Attempt) -> None:
        """The attempt's process stops (no heartbeat, no watchdog) until its next step."""
        if attempt.life is Life.RUNNING:
            attempt.life = Life.FROZEN
            note(f"{attempt.id} freezes at {at(self._now())}")

    def _finish(self, attempt: Attempt, op: Op, result: JobResult | None = None, fault: str = "none") -> None:
        """The one write that ends an attempt, made by the delivery's own finisher
        (RunFinisher.end, with the job's status riding along as the attempt's instance serves
        the job); `fault` is what that write meets (a release without a checkpoint is a delete)."""
        self._watchdog()
        if not attempt.alive:
            return
        self._thaw(attempt)  # frozen as it sent this write: it goes out as it thaws
        serving = self.served[attempt.id]
        what = f"{op} {result or ''}".strip()
        deletes = op is Op.RELEASE and attempt.latest() is None
        self._script_write(Operation.DELETE if deletes else Operation.UPDATE, fault)
        report = DeliveryReport()
        with self._as(Acting(attempt, op, result=result, limits=serving.limits)):
            answer = serving.finisher.end(
                claim_key(attempt), attempt.claim, self._ending(attempt, result), report
            )
        if answer.outcome is Outcome.LEASE_LOST:
            self._lease_lost(attempt, what)
            return
        if answer.outcome is Outcome.STORE_ERROR:
            note(f"{attempt.id}'s {what} of {label(claim_key(attempt))} failed ({report.error})")
            self._end(attempt, "store error")
            return
        run = self.model.run(claim_key(attempt))
        note(f"{attempt.id}: {what} of {label(run.key)} done at {at(self._now())}")
        self._end(attempt, what)
        if (run.key.run_id, op) in attempt.committed:
            return
        if op is Op.COMPLETE:
            self.model.violation(
                2, f"{attempt.id} was answered '{what}' done, but no completion of its applied"
            )
        elif run.status is not RunStatus.ABSENT:  # a release answered done on a free run is harmless
            self.model.violation(
                8, f"{attempt.id} was answered 'released', but {label(run.key)} is {run.status}"
            )

    def _ending(self, attempt: Attempt, result: JobResult | None) -> Ending:
        """How the attempt ended, as the handler hands it to the finisher: skipped late, or the
        job ran and returned (its effect staged in context.writes), failed, or failed for good."""
        if result is JobResult.SKIPPED_LATE:
            reason = "delivered past the job's starting deadline: not run"
            return Skip(JobResult.SKIPPED_LATE, reason, Outcome.SKIPPED_LATE, f"skipped: {reason}")
        key, claim = claim_key(attempt), attempt.claim
        context = RunContext(
            run_id=key.run_id,
            job_name=key.job_name,
            schedule_time=key.schedule_time,
            forced=key.forced,
            project=PROJECT,
            location=LOCATION,
            attempt_id=attempt.id,
            fence=claim.fence,
            body=b"",
            claimed_at=claim.claimed_at,
            progress=Progress(attempt.latest()),
        )
        if result is JobResult.SUCCEEDED:
            # The job's effect: a counter of its run, incremented in the completing commit.
            effect = self.client.document(f"{EFFECTS}/{attempt.run_id}")
            context.writes.set(effect, {"count": firestore.Increment(1), "by": attempt.id}, merge=True)
            return Ran(context, '"done"', None)
        if result is JobResult.TERMINAL_FAILURE:
            return Ran(context, None, TerminalJobError(f"failed for good in {attempt.id}"))
        return Ran(context, None, RuntimeError(f"failed in {attempt.id}"))

    def _script_write(self, operation: Operation, fault: str) -> None:
        """The attempt's own next write meets `fault`. Scripts armed earlier (`fault_next`)
        come first: this one waits behind them, as the store takes scripts in order."""
        if fault != "none":
            kind, _, rival = fault.partition(" + ")
            self.store.script(operation, FAULTS[kind], after=self._rival if rival else None)

    def _lease_lost(self, attempt: Attempt, what: str) -> None:
        taker = attempt.taken_over_by.get(attempt.run_id)
        note(f"{attempt.id}'s {what} of {label(claim_key(attempt))}: lease_lost (taken over by {taker})")
        self._end(attempt, "lease lost")
        if not self.model.lost_lease_allowed(attempt):
            run = self.model.run(claim_key(attempt))
            self.model.violation(
                8,
                f"{attempt.id}'s {what} was answered lease_lost, yet no attempt took {label(run.key)} over "
                f"under it (the run is {run.status}, {run.owner}'s)",
            )

    # ---- faults, time, pauses -----------------------------------------------------------

    @rule(
        operation=st.sampled_from(("create", "get", "update", "delete")),
        fault=st.sampled_from(tuple(FAULTS)),
        rival=st.booleans(),
    )
    def fault_next(self, operation: str, fault: str, rival: bool) -> None:
        """The store's next `operation` call meets `fault`; with `rival`, another delivery of the
        same run claims right after that call's first try reached the store."""
        if sum(self.store.scripted(each) for each in Operation) < 2:  # at most two waiting
            self.store.script(Operation(operation), FAULTS[fault], after=self._rival if rival else None)

    @rule(seconds=st.sampled_from(SECONDS))
    def clock_moves(self, seconds: int) -> None:
        """Time passes on Firestore's clock, a third of a lease at a time. Each running attempt's
        heartbeat renews its lease at each third; its watchdog ends it at its time limit, or
        at the give-up point of a lease no renewal kept. A frozen attempt does neither."""
        self._advance(timedelta(seconds=seconds))

    def _advance(self, by: timedelta) -> None:
        until = self._now() + by
        while self._now() < until:
            self.clock.advance(min(HEARTBEAT, until - self._now()).total_seconds())
            self._watchdog()
            for attempt in self._running():
                if attempt.alive:
                    self._renew(attempt, quiet=True)
            self._watchdog()

    def _running(self) -> list[Attempt]:
        return [
            attempt
            for attempt in self.model.attempts.values()
            if attempt.life is Life.RUNNING and attempt.executing
        ]

    @rule(
        target=attempts,
        job=st.sampled_from(sorted(JOBS)),
        ahead=st.sampled_from((1, 2, 4)),
        instance=st.integers(0, INSTANCES - 1),
        skew=st.sampled_from(SKEWS),
        fault=st.sampled_from(CLAIM_FAULTS),
    )
    def deliver_early(self, job: str, ahead: int, instance: int, skew: int, fault: str) -> Any:
        """Cloud Scheduler's dispatch of the job's next run (within two minutes) reaches Firestore
        `ahead` seconds before its ScheduleTime, inside the forced-run tolerance: it is the
        scheduled run, claimed early. Time passes until then first."""
        fire = JOBS[job].next_fire(self._now())
        if self.model.paused(job) or fire - self._now() > timedelta(minutes=2):
            return multiple()
        self._advance(max(fire - timedelta(seconds=ahead) - self._now(), timedelta(0)))
        return self._deliver(run_key(job, fire), instance, skew, "early", fault) or multiple()

    @rule(after=st.sampled_from((1, 3)))
    def ttl_deletes(self, after: int) -> None:
        """Time passes until `after` seconds past the retention of the next completed record
        to reach it (its expire_at, within the retention and a lease), and Firestore's TTL
        deletes every completed record past its own."""
        now = self._now()
        ahead = [moment for moment in self._retained_until().values() if moment > now]
        if ahead and min(ahead) - now <= RETENTION + LEASE:
            self._advance(min(ahead) + timedelta(seconds=after) - now)
        gone = sorted(run_id for run_id, moment in self._retained_until().items() if moment < self._now())
        if not gone:
            return
        note(
            f"at {at(self._now())} the TTL deletes {[label(self.model.runs[run_id].key) for run_id in gone]}"
        )
        deletes = [StagedWrite(WriteKind.DELETE, self.client.document(f"{RUNS}/{run_id}")) for run_id in gone]
        with self._as(Outside.TTL):
            self.store.commit(deletes)

    def _retained_until(self) -> dict[str, datetime]:
        """The completed records in the store, by run id: their expire_at."""
        return {
            run_id: record.fields[EXPIRE_AT]
            for run_id, record in self.store.records().items()
            if record.fields.get(STATUS) == Status.COMPLETED
            and isinstance(record.fields.get(EXPIRE_AT), datetime)
        }

    # ---- the jobs' own state: deploys of the job table, `ops resume` ------------------

    @initialize(limit=st.integers(1, 3), keyless=st.booleans())
    def deploy(self, limit: int, keyless: bool) -> None:
        """The instances serve the stack's job table: `often` pauses after `limit` failed runs
        in a row; with `keyless`, the last instance still serves the table before the key (a
        region the deploy has not reached yet)."""
        tables = [{OFTEN.name: limit}] * INSTANCES
        if keyless:
            tables[-1] = {}
        self.serving = [self._deployed(instance, table) for instance, table in enumerate(tables)]
        note(f"instances serve pauseAfterFailures {tables}")

    @rule(
        instance=st.integers(0, INSTANCES - 1),
        job=st.sampled_from(sorted(JOBS)),
        limit=st.sampled_from(LIMITS),
    )
    def deploy_table(self, instance: int, job: str, limit: int | None) -> None:
        """The function is deployed to `instance` with a job table giving `job` pauseAfterFailures
        `limit` (None: the key removed; the other instance, a region not deployed yet, keeps its
        table); the attempts already running there finish as they were served."""
        limits = {name: value for name, value in self.serving[instance].limits.items() if name != job}
        if limit is not None:
            limits[job] = limit
        self.serving[instance] = self._deployed(instance, limits)
        note(f"instance {instance} now serves pauseAfterFailures {limits or 'for no job'}")

    @rule(job=st.sampled_from(sorted(JOBS)))
    def ops_resume(self, job: str) -> None:
        """An operator resumes the job once it is paused: as many of its runs failed in a row as
        an instance's table gives it pauseAfterFailures. (`between_read_and_skip` resumes it at
        any moment.)"""
        limits = [serving.limits[job] for serving in self.serving if job in serving.limits]
        if limits and len(self.jobs.job(job).failed) >= min(limits):
            self._resume(job)

    def _resume(self, job: str) -> None:
        """`ops resume`'s one write, as ops/resume.py makes it: resume_fields() merged into the
        job's status."""
        document = self.serving[0].statuses.document_of(PROJECT, LOCATION, job)
        with self._as(Outside.RESUME):
            self.store.commit([StagedWrite(WriteKind.SET, document, resume_fields(), merge=True)])
        note(f"ops resume {job} at {at(self._now())}")

    @precondition(lambda self: len(self.between) < 2)
    @rule(what=st.sampled_from(BETWEEN))
    def between_read_and_skip(self, what: str) -> None:
        """The next skip of a paused job's run meets `what` between its decision's read of the
        job's status and its commit (at most two waiting)."""
        self.between.append(what)

    # ---- the stack's pauses of Scheduler jobs ------------------------------------------

    @rule(job=st.sampled_from(sorted(JOBS)))
    def pause(self, job: str) -> None:
        """The stack pauses the job (its pause_changed_at: now); Scheduler delivers nothing."""
        if not self.model.paused(job):
            pause = Pause(self._now(), audits_before=len(self.model.audits))
            self.model.pauses.setdefault(job, []).append(pause)
            note(f"{job} paused at {at(self._now())}")

    @rule(job=st.sampled_from(sorted(JOBS)))
    def resume(self, job: str) -> None:
        """The stack resumes the job (its pause_changed_at: now)."""
        if self.model.paused(job):
            self.model.pauses[job][-1].until = self._now()
            note(f"{job} resumed at {at(self._now())}")

    # ---- the audit -----------------------------------------------------------------------

    @rule(reads=st.sampled_from(("answered", "answered", "unavailable")))
    def missed_run_audit(self, reads: str) -> None:
        """The missed-run audit runs, its horizon the store's now (its claim's commit time);
        with `unavailable`, its reads fail and the audit with them (the next one continues from
        the last that completed)."""
        # The stack's audit runs hourly; here as often as every minute, never twice in one.
        if self.last_audit is not None and self._now() - self.last_audit < timedelta(minutes=1):
            return
        horizon = self.last_audit = self._now()
        if reads == "unavailable":
            self.store.script(Operation.GET_ALL, UNAVAILABLE)
        jobs = tuple(
            job.audited(
                not_before=START, paused=self.model.paused(name), changed_at=self.model.changed_at(name)
            )
            for name, job in JOBS.items()
        )
        sent: list[RunKey] = []

        def send(job: AuditedJob, schedule_time: datetime) -> str:
            sent.append(run_key(job.name, schedule_time))
            return "model"

        stream = io.StringIO()
        context = RunContext(
            run_id=AUDIT_RUN_ID,
            job_name="missed-run-audit",
            schedule_time=horizon,
            project=PROJECT,
            location=LOCATION,
            attempt_id=f"audit-{next(self.numbers)}",
            fence=0,
            body=b"",
            claimed_at=horizon,
            previous_reader=lambda: self.previous,
        )
        try:
            output = run_audit(
                context,
                AuditConfig(jobs, 3600),
                stored_record_reader(self.store),
                send,
                stream,
                lease=LEASE,
                retention=RETENTION,
            )
        except google_exceptions.GoogleAPIError as error:
            note(f"the audit at {at(horizon)} failed ({type(error).__name__})")
            return
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        missed = [line["schedule_time"] for line in lines if line.get("event") == "missed_run"]
        note(
            f"the audit at {at(horizon)} judged {output['judged']} runs, {output['paused']} paused, "
            f"missed {missed}, caught up {[label(key) for key in sent]}"
        )
        self.model.audited(horizon, output, lines)
        self.catchups.extend(sent)
        stored = json.loads(json.dumps(output))  # as the run record keeps it
        self.previous = PreviousRun(schedule_time=horizon, output=stored, run_id=AUDIT_RUN_ID)

    # ---- the invariants (the module's docstring) ------------------------------------------

    @invariant()
    def the_invariants_hold(self) -> None:
        self.model.check_store(self.store.snapshot, self._now())
        self.jobs.check_lines(self._pause_lines())
        violations = [*self.model.violations, *self.jobs.violations]
        for number in range(1, 12):
            found = [violation.what for violation in violations if violation.invariant == number]
            assert not found, f"invariant {number} broken: {found[0]}"


def claim_key(attempt: Attempt) -> RunKey:
    assert attempt.key is not None
    return attempt.key


@contextlib.contextmanager
def _shrinking_to_the_end() -> Iterator[None]:
    """Hypothesis stops shrinking a failure after 500 successful shrinks (its engine's
    MAX_SHRINKS), which leaves steps a 40-step sequence does not need; the printed sequence is
    the point of a failure here, so it may take more (its 300 s limit still holds)."""
    if not hasattr(engine, "MAX_SHRINKS"):
        yield
        return
    kept = engine.MAX_SHRINKS
    engine.MAX_SHRINKS = MAX_SHRINKS
    try:
        yield
    finally:
        engine.MAX_SHRINKS = kept


# The shortest sequences the model found for the faults it was built to find, each with the fix
# it checks reverted (kept as replayable steps: `$` is the attempt the step before returned).
# With the fix in place each keeps every invariant; without it, each breaks the one it names.
EARLY = {"ahead": 1, "fault": "none", "instance": 0, "job": "often", "skew": 0}
FOUND: dict[str, list[tuple[str, dict[str, Any]]]] = {
    # Invariant 9: the pause recorded by a skip whose commit lost its answer is announced once.
    "pause-announced-under-a-lost-answer": [
        ("deploy", {"limit": 1, "keyless": False}),
        ("deliver_early", EARLY),
        ("fail_retryably", {"attempt": "$", "fault": "none"}),
        ("clock_moves", {"seconds": 240}),
        ("between_read_and_skip", {"what": "lost answer"}),
        ("deliver_early", EARLY),
    ],
    # Invariant 10: no skip commits after a resume that committed since its decision's read.
    "no-skip-after-a-resume": [
        ("deploy", {"limit": 1, "keyless": False}),
        ("deliver_early", EARLY),
        ("fail_retryably", {"attempt": "$", "fault": "none"}),
        ("clock_moves", {"seconds": 240}),
        ("between_read_and_skip", {"what": "ops resume"}),
        ("deliver_early", EARLY),
    ],
    # Invariant 11: a success served by a table without the key still ends the streak.
    "no-stale-streak-after-the-key-comes-back": [
        ("deploy", {"limit": 1, "keyless": False}),
        ("deliver_early", EARLY),
        ("fail_retryably", {"attempt": "$", "fault": "none"}),
        ("deploy_table", {"instance": 0, "job": "often", "limit": None}),
        ("force", {"fault": "none", "instance": 0, "job": "often", "skew": 0}),
        ("succeed", {"attempt": "$", "fault": "none"}),
        ("clock_moves", {"seconds": 1900}),
        ("missed_run_audit", {"reads": "answered"}),
        ("deploy_table", {"instance": 0, "job": "often", "limit": 1}),
        ("clock_moves", {"seconds": 5}),
        ("deliver_caught_up", {"fault": "none", "instance": 0, "oldest": 0, "skew": 0}),
    ],
    # Invariant 5: a run claimed 4 s early, completed, is kept a retention past its ScheduleTime,
    # so the TTL does not hand it to the audit's catch-up while its window is open.
    "no-catch-up-of-a-completed-run-claimed-early": [
        ("deploy", {"limit": 1, "keyless": False}),
        ("deliver_early", {**EARLY, "ahead": 4}),
        ("succeed", {"attempt": "$", "fault": "none"}),
        ("ttl_deletes", {"after": 1}),
        ("missed_run_audit", {"reads": "answered"}),
    ],
    # Invariant 1: a job status read answered past the lease's give-up point starts nothing.
    "nothing-starts-past-the-give-up-point": [
        ("deploy", {"limit": 1, "keyless": False}),
        ("fault_next", {"operation": "get", "fault": "slow 45s", "rival": False}),
        ("deliver_early", EARLY),
    ],
}


@pytest.mark.parametrize("name", list(FOUND))
def test_the_sequences_the_model_found_keep_every_invariant(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes: list[str] = []
    monkeypatch.setattr(sys.modules[__name__], "note", notes.append)  # outside Hypothesis
    state, last = LifecycleModel(), None
    for step, arguments in FOUND[name]:
        called = {key: last if value == "$" else value for key, value in arguments.items()}
        last = getattr(state, step)(**called) or last
        state.the_invariants_hold()
    state.teardown()
    assert notes, "the steps ran through the model's rules"


def test_the_run_lifecycle_keeps_its_invariants_under_any_interleaving() -> None:
    profile = settings.get_profile(f"lifecycle-{PROFILE}")
    if PROFILE != "soak":
        with _shrinking_to_the_end():
            run_state_machine_as_test(LifecycleModel, settings=profile)
        return
    chosen = int(os.environ.get("LIFECYCLE_MODEL_SEED") or random.SystemRandom().randrange(2**32))
    replay = f"lifecycle model soak: seed {chosen} (LIFECYCLE_MODEL_SEED={chosen} replays it)"
    print(replay, flush=True)
    seed(chosen)(LifecycleModel)
    try:
        with _shrinking_to_the_end():
            run_state_machine_as_test(LifecycleModel, settings=profile)
    except BaseException as failure:
        failure.add_note(replay)
        raise
    finally:
        del LifecycleModel._hypothesis_internal_use_seed  # type: ignore[attr-defined]


def unrun(ledger: RunLedger) -> Callable[[Claim], None]:
    """A misjudged claim given back as the delivery's finisher gives one back: errors swallowed,
    the record left to wait out its lease."""

    def give_back(claim: Claim) -> None:
        with contextlib.suppress(google_exceptions.GoogleAPIError, LeaseLost):
            ledger.give_back(claim)

    return give_back
