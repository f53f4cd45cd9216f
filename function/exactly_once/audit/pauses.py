"""When each job was paused: the history that keeps a resume from making the pause's runs up.

A paused job's Scheduler job delivers nothing, so its runs have no record; once it is resumed
nothing in the ledger tells those runs from runs that were missed. The audit keeps the history
itself: each audit run carries the pauses it knows in its output (stored with its run, read by
the next audit through `RunContext.previous()`), adding what the stack's configuration says now.

The stack records when a job's `paused` key last changed (`AuditedJob.pause_changed_at`, taken
by `pulumi up` just before it updates the function and the Scheduler job). A pause ends at the
recorded resume plus the deploy's margin (`RESUME_MARGIN`: the function's build and the
Scheduler job's update come after it). The stack records only the latest change, so between
the last audit's horizon and that change the job may have been paused and resumed unseen;
what the configuration does not say is bounded the way that makes nothing up:

- paused now: the pause runs from the last audit's horizon (or from the recorded change, if
  earlier); with no recorded change at all, as far back as the audit looks (the retention);
- resumed now without a recorded change (the key removed): until this audit's horizon;
- resumed now, its last change after the last audit: paused from that audit's horizon to the
  change plus the margin;
- with no earlier audit (the first, or one whose output cannot be read), "the last audit's
  horizon" is as far back as the audit looks.

So a run without a record inside a pause is `paused`: never missed, never delivered again. At
worst a run missed in the audit interval before a pause began, or in the margin after it
ended, counts as paused too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from exactly_once.audit.config import AuditedJob, AuditError
from exactly_once.run_key import format_rfc3339, parse_rfc3339

# From the recorded resume to the moment Cloud Scheduler resumes the job: the function is
# built and deployed first. The same margin as for a job's first runs after it is created.
RESUME_MARGIN = timedelta(minutes=30)


@dataclass(frozen=True)
class Pause:
    """The job delivered nothing from `since` until `until` (None: it is still paused)."""

    since: datetime
    until: datetime | None = None

    def covers(self, instant: datetime) -> bool:
        return self.since <= instant and (self.until is None or instant <= self.until)

    def to_json(self) -> list[str | None]:
        return [format_rfc3339(self.since), format_rfc3339(self.until) if self.until else None]


PauseHistory = Mapping[str, tuple[Pause, ...]]


def observe(
    history: PauseHistory,
    jobs: Iterable[AuditedJob],
    *,
    horizon: datetime,
    previous_horizon: datetime | None,
    keep_since: datetime,
) -> dict[str, tuple[Pause, ...]]:
    """The history as of this audit: `history` (the previous audit's) with each job's current
    pause state applied, pauses that ended before `keep_since` dropped. `horizon` is this
    audit's; `previous_horizon` is where the previous audit stopped (None for the first one)."""
    # What happened between the last audit and now is known only by the latest recorded change:
    # from the last audit's horizon (or as far back as anything is kept, without one) to that
    # change, the job may have been paused and resumed any number of times unseen.
    unseen_since = previous_horizon if previous_horizon is not None else keep_since
    updated: dict[str, tuple[Pause, ...]] = {}
    for job in jobs:
        pauses = list(history.get(job.name, ()))
        current = pauses[-1] if pauses and pauses[-1].until is None else None
        changed = job.pause_changed_at
        if job.paused and current is None:
            pauses.append(Pause(min(changed, unseen_since) if changed is not None else keep_since))
        elif not job.paused:
            resumed = changed + RESUME_MARGIN if changed is not None else horizon
            if current is not None:
                pauses[-1] = Pause(current.since, max(resumed, current.since))
            elif changed is not None and changed > unseen_since:
                pauses.append(Pause(unseen_since, resumed))  # paused and resumed unseen
        kept = tuple(pause for pause in pauses if pause.until is None or pause.until >= keep_since)
        if kept:
            updated[job.name] = kept
    return updated


def paused_at(history: PauseHistory, job: str, instant: datetime) -> bool:
    return any(pause.covers(instant) for pause in history.get(job, ()))


def history_to_json(history: PauseHistory) -> dict[str, list[list[str | None]]]:
    return {job: [pause.to_json() for pause in pauses] for job, pauses in sorted(history.items())}


def history_from_json(raw: Any) -> dict[str, tuple[Pause, ...]]:
    """The history an earlier audit stored; AuditError when it is not of that shape."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise AuditError("pauses: expected an object of job names")
    history: dict[str, tuple[Pause, ...]] = {}
    for job, pauses in raw.items():
        if not isinstance(job, str) or not isinstance(pauses, list):
            raise AuditError(f"pauses[{job!r}]: expected a list of [since, until] pairs")
        parsed = []
        for pair in pauses:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise AuditError(f"pauses[{job!r}]: expected [since, until] pairs, got {pair!r}")
            try:
                since = parse_rfc3339(pair[0])
                until = parse_rfc3339(pair[1]) if isinstance(pair[1], str) else None
            except ValueError as error:
                raise AuditError(f"pauses[{job!r}]: {error}") from None
            parsed.append(Pause(since, until))
        history[job] = tuple(parsed)
    return history
