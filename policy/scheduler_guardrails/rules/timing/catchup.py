"""The timing rule of a job's catch-up window: the stack's audit must be able to serve it.

The audit delivers a missed run again once the run's last retry can have ended (its retry
window), at its first run after that, which comes up to one audit interval later. A window
shorter than both together closes before any audit can see the run: the setting would do
nothing. A window longer than the ledger's retention reaches runs whose records the TTL may
already have deleted: a run that completed would look missed and execute a second time. And
every audit run reads the record of each run in the window: a window that can hold more runs
than the audit walks for one job (MAX_CATCHUP_WINDOW_RUNS) leaves its oldest runs unread.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactly_once.audit.config import MAX_CATCHUP_WINDOW_RUNS

from .cron import crowded_window
from .rules import Violation


@dataclass(frozen=True)
class CatchupTiming:
    """What decides whether a job's catch-up window can be served, in seconds."""

    window_seconds: float
    schedule: str
    time_zone: str
    retry_window_seconds: float  # from a run's schedule time until no attempt can still arrive
    audit_interval_seconds: float
    retention_seconds: float


def check_catchup_window(timing: CatchupTiming) -> list[Violation]:
    """The rule's violations (fields: `window_seconds`, `retention_seconds`, `audit_interval_seconds`)."""
    violations: list[Violation] = []
    shortest = timing.retry_window_seconds + timing.audit_interval_seconds
    if timing.window_seconds < shortest:
        violations.append(
            Violation(
                "catchup-window-reachable",
                ("window_seconds", "audit_interval_seconds"),
                f"catch-up window {_s(timing.window_seconds)} is shorter than the job's retry "
                f"window {_s(timing.retry_window_seconds)} + the audit's interval "
                f"{_s(timing.audit_interval_seconds)} = {_s(shortest)}: a missed run "
                "leaves the window before an audit can deliver it; set at least that",
            )
        )
    if timing.window_seconds > timing.retention_seconds:
        violations.append(
            Violation(
                "catchup-window-within-retention",
                ("window_seconds", "retention_seconds"),
                f"catch-up window {_s(timing.window_seconds)} is longer than the ledger's retention "
                f"{_s(timing.retention_seconds)}: the TTL may have deleted the record of a run that "
                "completed, and the audit would deliver it again; shorten the window or raise the retention",
            )
        )
    crowded = crowded_window(
        timing.schedule, timing.time_zone, timing.window_seconds, MAX_CATCHUP_WINDOW_RUNS
    )
    if crowded is not None:
        runs = f"{crowded.runs}" if crowded.exact else f"at least {crowded.runs}"
        violations.append(
            Violation(
                "catchup-window-runs",
                ("window_seconds",),
                f"catch-up window {_s(timing.window_seconds)} can hold {runs} runs of schedule "
                f"{timing.schedule!r} in {timing.time_zone}, more than the {MAX_CATCHUP_WINDOW_RUNS} the "
                "missed-run audit walks for one job: the older missed runs of the window would never be "
                f"delivered again; set at most {_s(crowded.widest_seconds)}",
            )
        )
    return violations


def _s(seconds: float) -> str:
    return f"{seconds:g}s"
