"""One audit run's clock, span, knowledge and findings: the state its steps (audit/run.py,
audit/catchup.py, audit/judging.py) share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TextIO, TypeVar

from google.api_core import exceptions as google_exceptions

from exactly_once import log_fields, structured_log
from exactly_once.audit.budget import ReadDeadline
from exactly_once.audit.config import AuditConfig, AuditedJob, AuditError
from exactly_once.audit.missed_runs import (
    RecordReader,
)
from exactly_once.audit.pauses import PauseHistory
from exactly_once.audit.schedule import SharedWalks
from exactly_once.context import RunContext
from exactly_once.errors import error_text

T = TypeVar("T")


@dataclass(frozen=True)
class Span:
    """The retry windows one audit judges: those that closed in (since, until]. `not_judged`
    is where a longer span was cut at the records' retention (None when it was not);
    `horizon`, when the span was cut at the audit's budget, is where it would have ended (the
    runs whose windows closed in (until, horizon] are left for the next audit)."""

    since: datetime
    until: datetime
    not_judged: datetime | None = None
    horizon: datetime | None = None


@dataclass(frozen=True)
class LastAudit:
    """What the last completed audit left for this one: where it stopped, and the pauses."""

    judged_until: datetime | None = None
    pauses: PauseHistory | None = None


@dataclass
class AuditRun:
    """One audit run's clock, span, knowledge and findings, shared by its steps."""

    context: RunContext
    config: AuditConfig
    read_records: RecordReader
    stream: TextIO
    lease: timedelta
    span: Span
    pauses: PauseHistory
    target: str | None
    errors: dict[str, str]
    # When reading must stop (audit/budget.py), and a cap on the runs judged (None: only time).
    deadline: ReadDeadline
    max_runs: int | None = None
    capped: bool = False  # the span was cut at max_runs, not at the deadline
    # Each schedule's fire times, walked once for all the jobs that share it.
    walks: SharedWalks = field(default_factory=SharedWalks)

    @property
    def horizon(self) -> datetime:
        """The audit's "now": its claim's commit time, whether or not its span was cut."""
        return self.span.horizon or self.span.until

    def why_cut(self) -> str:
        """Why the span was cut short of the horizon: a cap on runs, or the time to read."""
        if self.capped:
            return f"the cap of {self.max_runs} runs was reached"
        return f"the time to read ran out (slowest read {self.deadline.slowest:.3f}s)"

    def per_job(self, step: Callable[[AuditedJob], T], jobs: Iterable[AuditedJob]) -> list[T]:
        """`step` for each job; a job it cannot judge is logged and left out, never the rest.
        Firestore failing is not a job's fault: the audit fails, and is retried, whole."""
        done = []
        for job in jobs:
            try:
                done.append(step(job))
            except google_exceptions.GoogleAPIError:
                raise
            except Exception as error:  # AuditError, or anything croniter raises on a schedule
                self.job_error(job, error)
        return done

    def job_error(self, job: AuditedJob, error: Exception) -> None:
        reason = error_text(str(error) if isinstance(error, AuditError) else repr(error))
        self.errors[job.name] = reason
        structured_log.emit(
            "ERROR",
            f"{log_fields.AUDIT_JOB_ERROR}: job {job.name} (schedule {job.schedule!r} in {job.time_zone}) "
            f"was not judged: {reason}; the other jobs were",
            {
                log_fields.EVENT: log_fields.AUDIT_JOB_ERROR,
                log_fields.JOB: job.name,
                "error": reason,
                "audit_run_id": self.context.run_id,
            },
            self.stream,
        )
