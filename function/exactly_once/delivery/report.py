"""What one delivery came to, as one value: its log line and its answer's fields are both
rendered from it.

A delivery learns about itself step by step (which run it is, the claim, the job's end, the
write that finished it), and a step may end it at any point; each step fills in what it
learned here, typed, and the handler renders the value once at the end. Nothing decides on
it: what the handler decides with (the claim, the downstream work the job started) it holds
itself. The log line's fields come out in one fixed order, the order in which a delivery
learns them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Final

from exactly_once import log_fields
from exactly_once.config import OverlapPolicy
from exactly_once.delivery.outcomes import Outcome
from exactly_once.ledger.downstream import DOWNSTREAM_NAME, DOWNSTREAM_STATE, Downstream
from exactly_once.ledger.protocol import Claim
from exactly_once.run_key import RunKey, format_rfc3339


class _Unset(Enum):
    """A field the delivery never learned, apart from one it learned as None (a holder whose
    record names no attempt, a lock whose holder is unknown): the first is left out of the
    line, the second written as null."""

    UNSET = 0


UNSET: Final = _Unset.UNSET


@dataclass
class DeliveryReport:
    # The header that made the request no Cloud Scheduler run.
    header: str | None = None
    # The run, as far as its identity got settled.
    key: RunKey | None = None
    # The ScheduleTime delivered, when it was the second instant of a wall time the job's zone
    # repeats: the run is the first instant's.
    delivered_schedule_time: datetime | None = None
    no_cache: bool = False
    # Answered from the instance's memory of completed runs.
    cached: bool = False
    attempt_id: str | None = None
    # Another attempt held the run's lease.
    holder_attempt_id: str | _Unset | None = UNSET
    # Another target recorded the run.
    recorded_target: str | None = None
    target: str | None = None
    claim: Claim | None = None
    # Delivered past the job's starting deadline: how late (seconds, Firestore's clock), and
    # the deadline.
    late_by_s: float | None = None
    starting_deadline_s: float | None = None
    overlap: OverlapPolicy | None = None
    # Another run of the job held its lock.
    holder_run_id: str | _Unset | None = UNSET
    retry_after_s: int | None = None
    job_returned: bool | None = None
    renewals: int = 0
    staged_writes: int = 0
    # What the job reported starting downstream.
    downstream: Downstream | None = None
    error: str | None = None
    traceback: str | None = None
    # The run's recorded result, when the delivery learned it.
    result: str | None = None
    body_mismatch: bool = False
    latency_ms: float | None = None

    def log_fields(self, outcome: Outcome) -> dict[str, Any]:
        """The delivery's log line, after its severity and message."""
        fields: dict[str, Any] = {log_fields.OUTCOME: outcome.value}

        def add(name: str, value: object) -> None:
            if value is not None and value is not UNSET and value is not False:
                fields[name] = value

        add("header", self.header)
        if (key := self.key) is not None:
            fields.update(
                {
                    log_fields.RUN_ID: key.run_id,
                    log_fields.JOB: key.job_name,
                    log_fields.SCHEDULE_TIME: key.schedule_time_rfc3339,
                    log_fields.TRIGGER: key.trigger.value,
                    "project": key.project,
                    "location": key.location,
                }
            )
        if self.delivered_schedule_time is not None:
            fields["delivered_schedule_time"] = format_rfc3339(self.delivered_schedule_time)
        add("no_cache", self.no_cache)
        add("attempt_id", self.attempt_id)
        if self.holder_attempt_id is not UNSET:
            fields["holder_attempt_id"] = self.holder_attempt_id
        add("recorded_target", self.recorded_target)
        add("target", self.target)
        if (claim := self.claim) is not None:
            fields.update(fence=claim.fence, claim=claim.kind.value)
        add("late_by_s", self.late_by_s)
        add("starting_deadline_s", self.starting_deadline_s)
        add("overlap", self.overlap.value if self.overlap is not None else None)
        if self.holder_run_id is not UNSET:
            fields["holder_run_id"] = self.holder_run_id
        add("retry_after_s", self.retry_after_s)
        if self.job_returned is not None:
            fields[log_fields.JOB_RETURNED] = self.job_returned
        add("renewals", self.renewals or None)
        add("staged_writes", self.staged_writes or None)
        if (downstream := self.downstream) is not None:
            fields.update({DOWNSTREAM_NAME: downstream.name, DOWNSTREAM_STATE: downstream.state.value})
        add("error", self.error)
        add("traceback", self.traceback)
        add("result", self.result)
        add("cached", self.cached)
        add("body_mismatch", self.body_mismatch)
        add(log_fields.LATENCY_MS, self.latency_ms)
        return fields
