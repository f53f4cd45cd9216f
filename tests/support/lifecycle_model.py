"""The reference model of tests/function/ledger/test_lifecycle_model.py: what must be true of
runs, attempts, pauses and audits, kept apart from the code under test.

Plain Python, no Hypothesis. It learns what happened from two sources only:

- the store's journal (`MemoryRunStore.observe`): every commit that really applied, whatever
  the caller heard of it, each attributed to the attempt whose call sent it, or to what made
  it `Outside` any attempt (Firestore's TTL, `ops resume`);
- what the harness tells it the attempts did: saved a checkpoint, started the job, stopped.

From those it decides by its own rules whether each commit was the writer's to make (a claim
only of a run nobody holds a live lease on, any later write only by the run's latest claimer),
what each run's record must hold (its checkpoint from what the attempts saved and carried, not
from what the store says; none once the TTL deleted it), which executions of a job ran when,
and what an audit must say of each expected run. Every departure is a `Violation`, filed under
the number of the invariant it breaks (the test module's docstring lists them). A job's own
state (its failure streak, its pauses) is job_state_model.py's, from the same journal.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

from exactly_once.audit.config import AuditedJob, Catchup, CatchupRuns
from exactly_once.audit.pauses import RESUME_MARGIN
from exactly_once.delivery.scheduler_request import RunKey, Trigger, format_rfc3339
from exactly_once.ledger import lifecycle
from exactly_once.ledger.fields import CHECKPOINT, RESULT
from exactly_once.ledger.lifecycle import JobResult, Status, StoredRecord
from exactly_once.testing.memory_store import AppliedWrite

PROJECT = "acme"
LOCATION = "europe-west1"
TARGET = "svc"
RUNS = "scheduler_runs"
EFFECTS = "effects"  # one counter document per run, incremented by its completing commit
LEASE = timedelta(seconds=30)
# The ledger's retention: as long as the catch-up window of `often`, the longest the stack's
# rules allow (a longer window reaches runs whose completed records the TTL may have deleted).
RETENTION = timedelta(hours=2)
# Cloud Scheduler's last retry of a run comes well inside the retention (the stack's timing
# rules: retention outlives retries), so no delivery but catch-up's reaches the ledger later
# than this after the run's ScheduleTime, and none finds a completed record past its retention.
LATEST_DELIVERY = RETENTION - timedelta(minutes=15)
# The audit's schedule period: how far back its first run looks.
AUDIT_INTERVAL = timedelta(hours=1)
# A delivery reaching Firestore more than this ahead of its ScheduleTime is a forced run.
FORCED_AHEAD = timedelta(seconds=5)
# The watchdog ends an attempt whose lease was not renewed for this share of it.
GIVE_UP_SHARE = 5 / 6

Snapshot = Callable[[str], StoredRecord | None]
_NEVER = datetime.min.replace(tzinfo=UTC)
_FOREVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ModelJob:
    """A job of the model's stack: its schedule (as cron for the audit, as arithmetic for the
    model), retry window, starting deadline and catch-up window."""

    name: str
    cron: str
    period: timedelta | None = None  # every `period` from midnight UTC...
    daily_at: time | None = None  # ...or once a day at this UTC time
    retry_window: timedelta = timedelta(minutes=10)
    starting_deadline: timedelta | None = None
    catchup_window: timedelta | None = None  # catch-up policy `runs: all` over this window

    def fires(self, since: datetime, until: datetime) -> list[datetime]:
        """The fire times in [since, until], by arithmetic (no cron library)."""
        found: list[datetime] = []
        if self.period is not None:
            midnight = since.replace(hour=0, minute=0, second=0, microsecond=0)
            steps = -((midnight - since) // self.period)  # ceiling
            moment = midnight + steps * self.period
            while moment <= until:
                found.append(moment)
                moment += self.period
            return found
        assert self.daily_at is not None
        day = since.date()
        while (moment := datetime.combine(day, self.daily_at, tzinfo=UTC)) <= until:
            if moment >= since:
                found.append(moment)
            day += timedelta(days=1)
        return found

    def next_fire(self, after: datetime) -> datetime:
        """The first fire time strictly after `after`: what a forced run announces."""
        return next(moment for moment in self.fires(after, after + timedelta(days=2)) if moment > after)

    def audited(self, *, not_before: datetime, paused: bool, changed_at: datetime | None) -> AuditedJob:
        """The job as the stack describes it to the audit (the job table's audit)."""
        window = self.catchup_window
        return AuditedJob(
            name=self.name,
            schedule=self.cron,
            time_zone="Etc/UTC",
            retry_window_seconds=self.retry_window.total_seconds(),
            not_before=not_before,
            paused=paused,
            pause_changed_at=changed_at,
            catchup=Catchup(window.total_seconds(), CatchupRuns.ALL) if window is not None else None,
        )


# Every five minutes rather than every minute: the audit walks a schedule's fire times with
# croniter, the bulk of a step's cost, and five times fewer keep the model fast to shrink.
OFTEN = ModelJob(
    "often",
    "*/5 * * * *",
    period=timedelta(minutes=5),
    retry_window=timedelta(minutes=10),
    catchup_window=RETENTION,
)
DAILY = ModelJob(
    "daily",
    "5 12 * * *",
    daily_at=time(12, 5),
    retry_window=timedelta(hours=1),
    starting_deadline=timedelta(minutes=15),
)
JOBS: Mapping[str, ModelJob] = {job.name: job for job in (OFTEN, DAILY)}
# How far back an audit judges at most: the retention less the longest retry window (an older
# run's record may be gone to the TTL), never less than its interval.
LOOKBACK = max(AUDIT_INTERVAL, RETENTION - max(job.retry_window for job in JOBS.values()))


def run_key(job: str, schedule_time: datetime, trigger: Trigger = Trigger.SCHEDULED) -> RunKey:
    return RunKey(PROJECT, LOCATION, job, schedule_time, trigger)


def label(key: RunKey) -> str:
    """A run as a scenario names it: job@HH:MM:SS, with ' forced' for a forced run."""
    return f"{key.job_name}@{key.schedule_time:%H:%M:%S}{' forced' if key.forced else ''}"


def at(moment: datetime | None) -> str:
    """A Firestore time as a scenario prints it: HH:MM:SS.mmm."""
    return "-" if moment is None else f"{moment:%H:%M:%S.%f}"[:-3]


class Op(enum.StrEnum):
    """What an attempt's call in flight is doing: the context its commits are judged in."""

    CLAIM = "claim"  # a delivery's claim, with the give-back of a wrong guess or a late claim
    RENEW = "renew"
    COMPLETE = "complete"  # a success, a terminal failure, or a late run skipped
    RELEASE = "release"  # a retryable failure
    DECIDE = "decide"  # a paused job's check: the run skipped, or the claim given back unrun


@dataclass(frozen=True)
class Acting:
    """An attempt's call in flight, and what its write must carry."""

    attempt: Attempt
    op: Op
    carried: str | None = None  # a renewal's checkpoint (None: none rides along)
    result: JobResult | None = None  # a completion's
    # Its instance's job table: pauseAfterFailures by job (job_state_model.py reads it).
    limits: Mapping[str, int] = field(default_factory=dict)


class Outside(enum.StrEnum):
    """Who made a commit outside any attempt's call."""

    RESUME = "ops resume"  # an operator's merge of a job's status
    TTL = "the TTL"  # Firestore deleting completed records past their expire_at


class Life(enum.StrEnum):
    RUNNING = "running"
    FROZEN = "frozen"  # the process is stopped: no heartbeat, no watchdog, no step
    ENDED = "ended"


@dataclass(eq=False)
class Attempt:
    """One delivery's attempt, as the model follows it."""

    id: str
    instance: int
    announced: RunKey  # the ScheduleTime its delivery carried (scheduled, as the headers say)
    how: str  # scheduled, redelivered, forced, caught up, rival
    key: RunKey | None = None  # the run it claimed, settled on Firestore's clock
    ends_at: datetime = _FOREVER  # its time limit (Firestore's clock)
    claim: Any = None  # the ledger's Claim, as of its last confirmed write
    life: Life = Life.RUNNING
    ended: str = ""
    executing: bool = False  # started the job
    abandoned: bool = False  # its claim gave up unanswered: its instance may continue the claim
    saved: list[str] = field(default_factory=list)  # the job's checkpoints, in order
    renewed: str | None = None  # the checkpoint the record holds as of its last confirmed write
    inherited: dict[str, str | None] = field(default_factory=dict)  # by run id: what its claim found
    taken_over_by: dict[str, str] = field(default_factory=dict)  # by run id: who claimed it under us
    committed: list[tuple[str, Op]] = field(default_factory=list)  # its writes that applied
    # By run id: when its release committed, and when its lease would have ended.
    released: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.life is not Life.ENDED

    @property
    def run_id(self) -> str:
        assert self.key is not None
        return self.key.run_id

    def latest(self) -> str | None:
        """What a retryable failure releases with: its latest checkpoint, else the inherited one."""
        return self.saved[-1] if self.saved else self.inherited.get(self.run_id)

    def next_checkpoint(self) -> str:
        """The JSON text of the job's next checkpoint: who saved it, and its number."""
        return f'{{"by":"{self.id}","step":{len(self.saved) + 1}}}'

    def __repr__(self) -> str:
        return self.id


@dataclass
class Execution:
    """An attempt running a run's job: from its start until it stopped (its finishing write or
    its end), or until its lease ends (a frozen process, or one that never wrote again)."""

    attempt: str
    started: datetime
    lease_end: datetime
    stopped: datetime | None = None

    @property
    def live_until(self) -> datetime:
        return min(self.stopped, self.lease_end) if self.stopped is not None else self.lease_end


class RunStatus(enum.StrEnum):
    ABSENT = "absent"
    IN_PROGRESS = "in_progress"
    RELEASED = "released"
    COMPLETED = "completed"


@dataclass
class RunModel:
    """What a run's record must be, by the model's rules."""

    key: RunKey
    status: RunStatus = RunStatus.ABSENT
    owner: str | None = None  # the attempt of the latest claim
    lease_end: datetime | None = None
    checkpoint: str | None = None
    result: JobResult | None = None
    completed_by: str | None = None
    ever_claimed: bool = False
    executions: list[Execution] = field(default_factory=list)
    claims: list[tuple[str, datetime]] = field(default_factory=list)  # (attempt, commit time)
    swept: datetime | None = None  # when the TTL deleted its completed record

    def leased_at(self, moment: datetime) -> bool:
        """Whether a live lease holds the run at `moment` (Firestore's clock)."""
        return self.status is RunStatus.IN_PROGRESS and self.lease_end is not None and self.lease_end > moment


@dataclass(frozen=True)
class Violation:
    invariant: int
    what: str


@dataclass
class Pause:
    """Cloud Scheduler delivered nothing of the job from `since` to `until` (None: still)."""

    since: datetime
    until: datetime | None = None
    # How many audits had completed when the pause began (in the order of the steps: an audit
    # and a pause may share an instant).
    audits_before: int = 0

    def covers(self, moment: datetime) -> bool:
        return self.since <= moment and (self.until is None or moment <= self.until)


class Expected(enum.StrEnum):
    """The model's verdict on one judged run; `either` where the audit's pause history is
    conservative by design (it cannot tell a run missed next to a pause from a paused one)."""

    COMPLETED = "completed"
    TERMINAL_FAILURE = "terminal failure"
    SKIPPED_LATE = "skipped late"
    MISSED = "missed"
    PAUSED = "paused"
    EITHER = "paused or missed"


_BY_RESULT = {
    JobResult.SUCCEEDED: Expected.COMPLETED,
    JobResult.TERMINAL_FAILURE: Expected.TERMINAL_FAILURE,
    JobResult.SKIPPED_LATE: Expected.SKIPPED_LATE,
    JobResult.SKIPPED_PAUSED: Expected.COMPLETED,
}


@dataclass
class Reference:
    """The reference model: runs, attempts, pauses, audits, and the violations found."""

    start: datetime
    runs: dict[str, RunModel] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    pauses: dict[str, list[Pause]] = field(default_factory=dict)
    audits: list[datetime] = field(default_factory=list)  # horizons of the audits that completed
    violations: list[Violation] = field(default_factory=list)

    def run(self, key: RunKey) -> RunModel:
        found = self.runs.get(key.run_id)
        if found is None:
            found = self.runs[key.run_id] = RunModel(key)
        return found

    def violation(self, invariant: int, what: str) -> None:
        self.violations.append(Violation(invariant, what))

    def found(self, invariant: int) -> list[str]:
        return [violation.what for violation in self.violations if violation.invariant == invariant]

    # ---- the journal: what really committed ------------------------------------------------

    def committed(self, applied: Sequence[AppliedWrite], acting: Acting | Outside | None) -> None:
        """One commit, in the context of the call that sent it: each run record it wrote (an
        effect riding in a completion is checked from the store, a job's status by
        job_state_model.py)."""
        prefix = f"{RUNS}/"
        for write in applied:
            if write.path.startswith(prefix):
                self._record_committed(self.runs.get(write.path.removeprefix(prefix)), write, acting)

    def _record_committed(
        self, run: RunModel | None, write: AppliedWrite, acting: Acting | Outside | None
    ) -> None:
        if run is not None and acting is Outside.TTL:
            if write.after is not None or run.status is not RunStatus.COMPLETED:
                self.violation(4, f"the TTL's delete left {label(run.key)} as {_describe(write.after)}")
            run.swept = write.time
            return
        if run is None or not isinstance(acting, Acting):
            self.violation(4, f"a commit wrote {write.path} outside any attempt's call")
            return
        attempt, before, after = acting.attempt, write.before, write.after
        held = _holds(before, attempt.id)
        status = after.fields.get(lifecycle.STATUS) if after is not None else None
        if _holds(after, attempt.id) and not held:
            self._claimed(run, attempt, write.time)
        elif not held:
            self.violation(
                4 if acting.op is not Op.COMPLETE else 2,
                f"{attempt.id}'s {acting.op} wrote {label(run.key)} ({_describe(after)}) over "
                f"{_describe(before)}: a record that was not its claim",
            )
        elif _holds(after, attempt.id):
            self._renewed(run, acting, write.time)
        elif status == Status.COMPLETED:
            self._completed(run, acting, write.time)
        elif after is None or status == Status.RELEASED:
            self._released(run, acting, write.time)
        else:
            self.violation(4, f"{attempt.id} left {label(run.key)} as {_describe(after)}")

    def _claimed(self, run: RunModel, attempt: Attempt, commit: datetime) -> None:
        previous = self.attempts.get(run.owner or "") if run.status is RunStatus.IN_PROGRESS else None
        continued = (  # the instance's own claim that gave up unanswered, never run
            previous is not None
            and previous.abandoned
            and not previous.executing
            and previous.instance == attempt.instance
        )
        if run.status is RunStatus.COMPLETED:
            self.violation(1, f"{attempt.id} claimed {label(run.key)}, which {run.completed_by} completed")
        elif run.leased_at(commit) and not continued:
            self.violation(
                1,
                f"{attempt.id} claimed {label(run.key)} at {at(commit)} under {run.owner}'s live lease "
                f"(until {at(run.lease_end)})",
            )
        if previous is not None:
            previous.taken_over_by[run.key.run_id] = attempt.id
        attempt.inherited[run.key.run_id] = run.checkpoint
        attempt.renewed = run.checkpoint
        attempt.committed.append((run.key.run_id, Op.CLAIM))
        run.status, run.owner, run.lease_end = RunStatus.IN_PROGRESS, attempt.id, commit + LEASE
        run.ever_claimed = True
        run.claims.append((attempt.id, commit))

    def _owns(self, run: RunModel, acting: Acting, invariant: int) -> bool:
        if run.owner == acting.attempt.id and run.status is RunStatus.IN_PROGRESS:
            return True
        self.violation(
            invariant,
            f"{acting.attempt.id}'s {acting.op} wrote {label(run.key)}, {run.status} as "
            f"{run.owner or 'nobody'}'s claim: a stale holder's write",
        )
        return False

    def _renewed(self, run: RunModel, acting: Acting, commit: datetime) -> None:
        if acting.op is not Op.RENEW:
            self.violation(4, f"{acting.attempt.id}'s {acting.op} rewrote {label(run.key)} as a renewal")
        if not self._owns(run, acting, 4):
            return
        run.lease_end = commit + LEASE  # a renewal that changed nothing keeps its commit time
        for execution in run.executions:
            if execution.attempt == acting.attempt.id:
                execution.lease_end = run.lease_end
        if acting.carried is not None:
            run.checkpoint = acting.carried
        acting.attempt.committed.append((run.key.run_id, Op.RENEW))

    def _released(self, run: RunModel, acting: Acting, commit: datetime) -> None:
        attempt = acting.attempt
        if acting.op not in (Op.RELEASE, Op.CLAIM, Op.DECIDE):
            self.violation(4, f"{attempt.id}'s {acting.op} released {label(run.key)}")
        if not self._owns(run, acting, 4):
            return
        # A failed job's release keeps its latest checkpoint; a claim given back unrun (a
        # wrong guess, a claim confirmed too late) puts back exactly what it inherited.
        keep = attempt.latest() if acting.op is Op.RELEASE else attempt.inherited.get(run.key.run_id)
        run.checkpoint = keep
        run.status = RunStatus.RELEASED if keep is not None else RunStatus.ABSENT
        attempt.released[run.key.run_id] = (commit, run.lease_end or commit)
        run.lease_end = None
        self._stopped(run, attempt, commit)
        attempt.committed.append((run.key.run_id, Op.RELEASE))

    def _completed(self, run: RunModel, acting: Acting, commit: datetime) -> None:
        if acting.op not in (Op.COMPLETE, Op.DECIDE):
            self.violation(2, f"{acting.attempt.id}'s {acting.op} completed {label(run.key)}")
        if not self._owns(run, acting, 2):
            return
        run.status, run.result, run.completed_by = RunStatus.COMPLETED, acting.result, acting.attempt.id
        run.checkpoint, run.lease_end = None, None
        self._stopped(run, acting.attempt, commit)
        acting.attempt.committed.append((run.key.run_id, Op.COMPLETE))

    @staticmethod
    def _stopped(run: RunModel, attempt: Attempt, moment: datetime) -> None:
        for execution in run.executions:
            if execution.attempt == attempt.id and execution.stopped is None:
                execution.stopped = moment

    # ---- executions --------------------------------------------------------------------

    def start_execution(self, attempt: Attempt, now: datetime) -> None:
        """`attempt` starts running its run's job at `now` (Firestore's clock)."""
        assert attempt.key is not None
        run = self.run(attempt.key)
        if run.status is RunStatus.COMPLETED:
            self.violation(1, f"{attempt.id} ran {label(run.key)}, which {run.completed_by} completed")
        if run.owner != attempt.id or not run.leased_at(now):
            self.violation(
                1,
                f"{attempt.id} started {label(run.key)} at {at(now)} without a live lease of its own "
                f"(the record is {run.status}, {run.owner}'s, its lease until {at(run.lease_end)})",
            )
        for other in run.executions:
            if other.attempt != attempt.id and other.live_until > now:
                self.violation(
                    1,
                    f"{attempt.id} started {label(run.key)} at {at(now)} while {other.attempt}'s execution "
                    f"(since {at(other.started)}) may run until {at(other.live_until)}",
                )
        attempt.executing = True
        run.executions.append(Execution(attempt.id, now, run.lease_end or now))

    def stop_execution(self, attempt: Attempt, now: datetime) -> None:
        """`attempt`'s job stopped at `now` (ended, answered, or died) without a write applying."""
        if attempt.key is not None:
            self._stopped(self.run(attempt.key), attempt, now)

    def lost_lease_allowed(self, attempt: Attempt) -> bool:
        """Whether `attempt` may be answered lease_lost (invariant 8): another attempt claimed
        the run under it, or its release committed and the next claim came so close to its
        lease's end, or after it, that its record cannot tell that claim from a takeover of
        its lease (lifecycle.after_refusal: within CLAIM_STAMP_MARGIN of that end)."""
        run_id = attempt.run_id
        if run_id in attempt.taken_over_by:
            return True
        if run_id not in attempt.released:
            return False
        released, lease_end = attempt.released[run_id]
        later = [commit for claimer, commit in self.runs[run_id].claims if commit > released]
        return bool(later) and later[0] + lifecycle.CLAIM_STAMP_MARGIN >= lease_end

    # ---- pauses -------------------------------------------------------------------------

    def paused(self, job: str) -> bool:
        pauses = self.pauses.get(job, [])
        return bool(pauses) and pauses[-1].until is None

    def changed_at(self, job: str) -> datetime | None:
        """When the stack last paused or resumed the job (pause_changed_at)."""
        pauses = self.pauses.get(job, [])
        if not pauses:
            return None
        return pauses[-1].until or pauses[-1].since

    def in_pause(self, job: str, moment: datetime) -> bool:
        """Whether Cloud Scheduler had the job paused at `moment`."""
        return any(pause.covers(moment) for pause in self.pauses.get(job, []))

    def maybe_paused(self, job: str, moment: datetime) -> bool:
        """Whether the audit may count an unrecorded run at `moment` as paused, by its documented
        bounds: a pause runs from its change (or from the last audit before it, when the job
        was paused and resumed between two audits) to its resume's change plus the deploy's
        margin (RESUME_MARGIN)."""
        for pause in self.pauses.get(job, []):
            # From the horizon of the last audit before it: where the next one's span starts.
            since = self.audits[pause.audits_before - 1] if pause.audits_before else _NEVER
            if since <= moment and (pause.until is None or moment <= pause.until + RESUME_MARGIN):
                return True
        return False

    # ---- audits -----------------------------------------------------------------------

    def expected(self, job: ModelJob, moment: datetime) -> Expected:
        """What an audit must say of the job's scheduled run at `moment`, its window closed."""
        run = self.runs.get(run_key(job.name, moment).run_id) or RunModel(run_key(job.name, moment))
        if run.status is RunStatus.COMPLETED:
            return _BY_RESULT[run.result or JobResult.SUCCEEDED]
        if run.status is not RunStatus.ABSENT:
            return Expected.MISSED  # recorded but never completed: missed, whatever the pauses
        if self.in_pause(job.name, moment) and not run.ever_claimed:
            return Expected.PAUSED
        if self.maybe_paused(job.name, moment):
            return Expected.EITHER
        return Expected.MISSED

    def judged_between(self, since: datetime, until: datetime) -> list[tuple[ModelJob, datetime]]:
        """The scheduled runs whose retry window closed in (since, until], deployed at the start."""
        return [
            (job, moment)
            for job in JOBS.values()
            for moment in job.fires(since - job.retry_window, until - job.retry_window)
            if since < moment + job.retry_window <= until and moment >= self.start
        ]

    def audited(
        self,
        horizon: datetime,
        output: Mapping[str, Any],
        lines: Sequence[Mapping[str, Any]],
    ) -> None:
        """Judge an audit that completed at `horizon` (its claim's commit time) by its output
        and log lines; it becomes the previous audit. It judges from where the last one stopped,
        at most LOOKBACK back: the runs of a longer gap between audits are never judged."""
        since = max(self.audits[-1] if self.audits else horizon - AUDIT_INTERVAL, horizon - LOOKBACK)
        span = (output.get("judged_from"), output.get("judged_until"))
        if span != (format_rfc3339(since), format_rfc3339(horizon)):
            self.violation(
                5,
                f"the audit at {at(horizon)} judged {span}, "
                f"not from where the last one stopped ({at(since)})",
            )
        judged = {
            run_key(job.name, moment).run_id: (job, moment)
            for job, moment in self.judged_between(since, horizon)
        }
        caught = {entry["run_id"]: entry for entry in output.get("caught_up", [])}
        missed = {line["run_id"] for line in lines if line.get("event") == "missed_run"}
        summary = next((line for line in lines if line.get("event") == "missed_run_audit"), {})
        if output.get("judged") != len(judged):
            self.violation(
                5,
                f"the audit at {at(horizon)} judged {output.get('judged')} runs, "
                f"not the {len(judged)} whose retry window closed",
            )
        expected = {run_id: self.expected(job, moment) for run_id, (job, moment) in judged.items()}
        paused = sum(verdict is Expected.PAUSED for verdict in expected.values())
        either = sum(verdict is Expected.EITHER for verdict in expected.values())
        skipped = sum(verdict is Expected.SKIPPED_LATE for verdict in expected.values())
        if summary.get("skipped_late") != skipped:
            self.violation(
                5,
                f"the audit at {at(horizon)} counted {summary.get('skipped_late')} skipped late, "
                f"not {skipped}",
            )
        if not paused <= output.get("paused", -1) <= paused + either:
            self.violation(
                7,
                f"the audit at {at(horizon)} counted {output.get('paused')} paused, "
                f"not {paused} (+{either} either way)",
            )
        for run_id, verdict in expected.items():
            job, moment = judged[run_id]
            name = label(run_key(job.name, moment))
            if run_id in missed and verdict is Expected.PAUSED:
                self.violation(
                    7, f"the audit at {at(horizon)} reported {name} missed: the job was paused then"
                )
            elif run_id in missed and verdict not in (Expected.MISSED, Expected.EITHER):
                self.violation(5, f"the audit at {at(horizon)} reported {name} missed, which is {verdict}")
            elif verdict is Expected.MISSED and run_id not in missed and run_id not in caught:
                self.violation(
                    5, f"the audit at {at(horizon)} neither reported {name} missed nor caught it up"
                )
        for run_id in missed - judged.keys():
            self.violation(5, f"the audit at {at(horizon)} reported run {run_id[:8]} missed outside its span")
        self._caught_up(horizon, caught)
        self.audits.append(horizon)

    def _caught_up(self, horizon: datetime, caught: Mapping[str, Any]) -> None:
        """Catch-up delivers, of each catch-up job's window (from its start, excluded, to the
        horizon), every missed run a delivery would claim, and nothing else (invariants 5 and
        7): never a completed one, its record gone to the TTL or not."""
        candidates: dict[str, tuple[ModelJob, datetime]] = {}
        for job in JOBS.values():
            if job.catchup_window is None:
                continue
            since = horizon - job.catchup_window
            for moment in job.fires(since, horizon):
                if since < moment and moment >= self.start and moment + job.retry_window <= horizon:
                    candidates[run_key(job.name, moment).run_id] = (job, moment)
        for run_id, (job, moment) in candidates.items():
            verdict = self.expected(job, moment)
            run = self.runs.get(run_id)
            claimable = verdict is Expected.MISSED and not (run is not None and run.leased_at(horizon))
            name = label(run_key(job.name, moment))
            if run_id in caught and verdict is Expected.PAUSED:
                self.violation(7, f"the audit at {at(horizon)} caught up {name}: the job was paused then")
            elif run_id in caught and verdict is not Expected.EITHER and not claimable:
                swept = f" (the TTL deleted its record at {at(run.swept)})" if run and run.swept else ""
                self.violation(
                    5,
                    f"the audit at {at(horizon)} caught up {name}, which is {verdict} and not "
                    f"claimable{swept}",
                )
            elif run_id not in caught and claimable:
                state = run.status if run is not None else RunStatus.ABSENT
                self.violation(
                    5, f"the audit at {at(horizon)} did not catch up {name}, missed and claimable ({state})"
                )
        for run_id in caught.keys() - candidates.keys():
            self.violation(
                5, f"the audit at {at(horizon)} caught up run {run_id[:8]}, outside any catch-up window"
            )

    # ---- the store against the model ----------------------------------------------------

    def check_store(self, snapshot: Snapshot, now: datetime) -> None:
        """Each run's record and effect against the model (invariants 2, 3 and 4)."""
        for run_id, run in self.runs.items():
            if not run.ever_claimed:
                continue  # nothing wrote it: any write would have been judged as a claim
            record = snapshot(f"{RUNS}/{run_id}")
            self._check_record(run, record)
            self._check_effect(run, snapshot(f"{EFFECTS}/{run_id}"))
            if run.status is not RunStatus.COMPLETED:
                self._check_claimable(run, record, now)

    def _check_record(self, run: RunModel, record: StoredRecord | None) -> None:
        name = label(run.key)
        if record is None:
            if run.status is not RunStatus.ABSENT and run.swept is None:
                self.violation(
                    4, f"{name} has no record, but must be {run.status} with checkpoint {run.checkpoint}"
                )
            return
        fields = record.fields
        found = (fields.get(lifecycle.STATUS), fields.get(CHECKPOINT))
        if run.status is RunStatus.ABSENT:
            self.violation(4, f"{name} must have no record, but holds {found}")
        elif found != (run.status.value, run.checkpoint):
            self.violation(4, f"{name} holds {found}, but must be {(run.status.value, run.checkpoint)}")
        elif run.status is RunStatus.IN_PROGRESS and (
            fields.get(lifecycle.ATTEMPT_ID) != run.owner or record.update_time + LEASE != run.lease_end
        ):
            self.violation(
                4,
                f"{name} is held by {fields.get(lifecycle.ATTEMPT_ID)} "
                f"until {at(record.update_time + LEASE)}, "
                f"not by {run.owner} until {at(run.lease_end)}",
            )
        elif run.status is RunStatus.COMPLETED and fields.get(RESULT) != run.result:
            self.violation(4, f"{name} completed as {fields.get(RESULT)}, not {run.result}")

    def _check_effect(self, run: RunModel, effect: StoredRecord | None) -> None:
        succeeded = run.status is RunStatus.COMPLETED and run.result is JobResult.SUCCEEDED
        found = None if effect is None else (effect.fields.get("count"), effect.fields.get("by"))
        wanted = (1, run.completed_by) if succeeded else None
        if found != wanted:
            self.violation(
                2,
                f"{label(run.key)}'s staged write applied as {found} (count, by), but must be {wanted}: "
                f"the run is {run.status} {run.result or ''}",
            )

    def _check_claimable(self, run: RunModel, record: StoredRecord | None, now: datetime) -> None:
        if record is None:
            return
        later = StoredRecord(
            record.fields, record.update_time, now + LEASE + timedelta(seconds=1), record.create_time
        )
        verdict = lifecycle.on_claim(later, target=TARGET, default_lease=LEASE)
        if not isinstance(verdict, lifecycle.TakeOver):
            self.violation(
                3, f"{label(run.key)} is not completed, yet a delivery once leases lapse gets {verdict}"
            )


def _holds(record: StoredRecord | None, attempt_id: str) -> bool:
    return lifecycle.holds_claim(record, attempt_id)


def _describe(record: StoredRecord | None) -> str:
    if record is None:
        return "no record"
    fields = record.fields
    return f"{fields.get(lifecycle.STATUS)} by {fields.get(lifecycle.ATTEMPT_ID)}"
