"""The reference model of a job's own state, for tests/function/ledger/test_lifecycle_model.py
(its invariants 9 to 11): the job's failure streak, its pauses and their one ERROR line.

Plain Python, kept apart from ledger/lifecycle/job_state.py, which it checks. It learns from
the journal the run model reads (every commit that wrote a job's status document, in the
context of the call that sent it, whatever that call heard of it), and from the harness: when
a delivery began deciding on the job's status, which deliveries were answered that their skip
committed, and the lines the deliveries logged. Its rules, in its own words:

- A job's streak is the runs that failed since its last success or `ops resume`, each counted
  once however many of its attempts failed, in the order they first failed. A failure counts
  only when the instance that ended it serves the job with pauseAfterFailures (another table
  says nothing of pausing it); a success ends the streak whatever its instance's table says.
- An instance serving the job with pauseAfterFailures N holds a run back when the streak has at
  least N runs and the run is not one of them (a failing run's retries still run). A skip is
  recorded only on that: decided on a read of the status, it must still stand at its commit.
- Each pause a skip's commit records (a new `failure_paused_at`, with the runs it is after) is
  announced by one ERROR line, never more; and by exactly one when the delivery of that skip
  was answered that its skip committed (it knows the commit as its own, its answer lost or not).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from exactly_once import log_fields
from exactly_once.ledger.fields import FAILURE_PAUSED_AFTER, FAILURE_PAUSED_AT, job_status_collection
from exactly_once.ledger.lifecycle import JobResult
from exactly_once.testing.memory_store import AppliedWrite
from tests.support.lifecycle_model import RUNS, Acting, Op, Outside, Violation, at, label

# The invariants of the test module's docstring this model checks.
ONE_LINE_PER_PAUSE = 9
SKIP_STANDS_ON_ITS_READ = 10
NO_STALE_STREAK = 11

_STATUSES = f"{job_status_collection(RUNS)}/"


@dataclass(frozen=True)
class Ended:
    """What ended a job's streak (a run's success, or `ops resume`), and when it committed."""

    what: str
    time: datetime


@dataclass(frozen=True)
class Recorded:
    """A pause as a skip's commit recorded it: the job, the runs it is after, the run skipped."""

    job: str
    failed_runs: tuple[str, ...]
    run_id: str


@dataclass
class JobModel:
    """One job's streak by the model's rules."""

    failed: list[str] = field(default_factory=list)
    ended: list[Ended] = field(default_factory=list)


@dataclass
class JobStates:
    """The jobs' streaks, the pauses recorded, and the violations of invariants 9 to 11."""

    jobs: dict[str, JobModel] = field(default_factory=dict)
    # Each pause recorded, with the attempt whose commit recorded it.
    recorded: dict[Recorded, str] = field(default_factory=dict)
    known: set[Recorded] = field(default_factory=set)  # those whose delivery was answered skipped
    deciding: dict[str, int] = field(default_factory=dict)  # by attempt: len(ended) at its last read
    names: dict[str, str] = field(default_factory=dict)  # each run as a scenario names it, by run id
    violations: list[Violation] = field(default_factory=list)

    def job(self, name: str) -> JobModel:
        return self.jobs.setdefault(name, JobModel())

    def violation(self, invariant: int, what: str) -> None:
        self.violations.append(Violation(invariant, what))

    def named(self, run_ids: Sequence[str]) -> str:
        return ", ".join(self.names.get(run_id, run_id[:8]) for run_id in run_ids) or "none"

    # ---- the journal: what really committed ------------------------------------------------

    def committed(self, applied: Sequence[AppliedWrite], acting: Acting | Outside | None) -> None:
        """One commit, in the context of the call that sent it: what it did to a job's streak
        is what the run's write beside the status's did (a status write rides only in one)."""
        for status in applied:
            if not status.path.startswith(_STATUSES):
                continue
            job = status.path.rsplit("|", 1)[-1]
            if acting is Outside.RESUME:
                self._ended(job, Ended(acting.value, status.time))
                continue
            if not isinstance(acting, Acting) or acting.attempt.key is None:
                self.violation(SKIP_STANDS_ON_ITS_READ, f"a commit wrote {status.path} outside any run's end")
                continue
            attempt, key = acting.attempt, acting.attempt.key
            self.names[key.run_id] = label(key)
            if acting.op is Op.COMPLETE and acting.result is JobResult.SUCCEEDED:
                self._ended(job, Ended(f"{attempt.id}'s success of {label(key)}", status.time))
            elif acting.op is Op.RELEASE or acting.result is JobResult.TERMINAL_FAILURE:
                streak = self.job(job).failed
                if job in acting.limits and key.run_id not in streak:
                    streak.append(key.run_id)
            elif acting.op is Op.DECIDE and job in acting.limits:
                self._skipped(job, acting, status)
            else:
                self.violation(
                    SKIP_STANDS_ON_ITS_READ,
                    f"{attempt.id}'s {acting.op} of {label(key)} wrote the job's status at {at(status.time)}",
                )

    def _ended(self, job: str, ended: Ended) -> None:
        model = self.job(job)
        model.failed.clear()
        model.ended.append(ended)

    def _skipped(self, job: str, acting: Acting, status: AppliedWrite) -> None:
        """The attempt's commit recorded its run skipped because its job is paused, with
        `status`, the job's status as that commit wrote it (invariants 10 and 11)."""
        attempt, key, limit = acting.attempt, acting.attempt.key, acting.limits[job]
        assert key is not None
        model = self.job(job)
        if not (len(model.failed) >= limit and key.run_id not in model.failed):
            since = self.deciding.get(attempt.id, len(model.ended))
            later = model.ended[since:]
            streak = self.named(model.failed)
            if later:
                self.violation(
                    SKIP_STANDS_ON_ITS_READ,
                    f"{attempt.id}'s commit at {at(status.time)} recorded {label(key)} skipped_paused after "
                    f"{later[-1].what} committed at {at(later[-1].time)}, once its decision had read the "
                    f"job's status (runs failed in a row now: {streak}; pauseAfterFailures {limit})",
                )
            else:
                since_when = (
                    f" since {model.ended[-1].what} at {at(model.ended[-1].time)}" if model.ended else ""
                )
                self.violation(
                    NO_STALE_STREAK,
                    f"{attempt.id} skipped {label(key)} at {at(status.time)} (pauseAfterFailures {limit}), "
                    f"but the job's runs failed in a row{since_when} are: {streak}",
                )
        before = status.before.fields if status.before is not None else {}
        after = status.after.fields if status.after is not None else {}
        paused_at = after.get(FAILURE_PAUSED_AT)
        if paused_at is not None and paused_at != before.get(FAILURE_PAUSED_AT):
            runs = after.get(FAILURE_PAUSED_AFTER)
            self.recorded[Recorded(job, tuple(runs) if isinstance(runs, list) else (), key.run_id)] = (
                attempt.id
            )

    # ---- what the harness tells ------------------------------------------------------

    def decides(self, attempt: str, job: str) -> None:
        """`attempt`'s delivery reads the job's status to decide whether its run is held back."""
        self.deciding[attempt] = len(self.job(job).ended)

    def answered_skipped(self, attempt: str, run_id: str) -> None:
        """`attempt`'s delivery was answered that its skip of `run_id` committed."""
        self.known.update(
            pause for pause, by in self.recorded.items() if by == attempt and pause.run_id == run_id
        )

    def check_lines(self, lines: Sequence[Mapping[str, Any]]) -> None:
        """Invariant 9, on every `job_paused_after_failures` line the deliveries wrote."""
        announced = Counter(
            Recorded(
                str(line.get(log_fields.JOB)),
                tuple(line.get(log_fields.FAILED_RUNS) or ()),
                str(line.get("first_skipped_run_id")),
            )
            for line in lines
        )
        for pause, count in announced.items():
            if pause not in self.recorded:
                self.violation(
                    ONE_LINE_PER_PAUSE,
                    f"a line announced {pause.job} paused after {self.named(pause.failed_runs)} from the "
                    f"skip of {self.named([pause.run_id])}, whose commit recorded no such pause",
                )
            elif count > 1:
                self.violation(
                    ONE_LINE_PER_PAUSE,
                    f"{count} lines announced {pause.job}'s pause after {self.named(pause.failed_runs)}, "
                    f"recorded once by {self.recorded[pause]}",
                )
        for pause in self.known - announced.keys():
            self.violation(
                ONE_LINE_PER_PAUSE,
                f"{self.recorded[pause]}'s skip of {self.named([pause.run_id])} recorded {pause.job}'s pause "
                f"after {self.named(pause.failed_runs)} and its delivery was answered that the skip "
                "committed, yet no line announced it",
            )
