"""Following a run's downstream work after its attempt: ask the API, record what changed.

A run's record says what it started and in which state (ledger/downstream.py). Two readers
ask the downstream API again while the record says `running`: a run of a `skip` or `wait` job
whose lock the previous run still holds (delivery/overlap.py), and the missed-run audit
(audit/downstream.py). Either records a change with a write conditioned on the record as it
read it, so two of them never both record (and log) the same end: the one whose write commits
logs a failed end as one `downstream_failed` line, which the stack alerts on.

How to ask is the business of the module that starts a kind of work: it registers a follower
for its kind when it is imported (`register_follower`), beside the client that starts the
work. The router imports every job's handler when the instance starts, so an instance that
serves a job, or the stack's audit, has every kind the stack starts registered before it
follows any. The core names no kind: a fork that drops the proxy jobs drops their followers
with them, and a record of a kind nobody registered is reported, never followed (UnknownKind).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TextIO

from exactly_once import log_fields, structured_log
from exactly_once.ledger.downstream import DOWNSTREAM_CHECKED_AT, Downstream
from exactly_once.ledger.store import COMMIT_TIME, RunStore, StaleWrite, StoredRecord
from exactly_once.run_key import format_rfc3339

# Reads the current state of a started piece of work through its API; the second argument
# is the call's timeout in seconds. Raises what the API raises when it does not answer.
Follower = Callable[[Downstream, float], Downstream]

_followers: dict[str, Follower] = {}
_registering = threading.Lock()


class UnknownKind(LookupError):
    """A record names a kind of downstream work no imported module registered a follower for."""


def register_follower(kind: str, follower: Follower) -> None:
    """Make `follower` the way to ask about work of `kind`. A second, different follower for
    one kind is refused: two modules claiming a kind is a mistake to see at start-up, not a
    silent choice of whichever was imported last."""
    with _registering:
        known = _followers.get(kind)
        if known is not None and known is not follower:
            raise ValueError(f"downstream kind {kind!r} already has a follower: {known!r}")
        _followers[kind] = follower


def follower(kind: str) -> Follower:
    found = _followers.get(kind)
    if found is None:
        raise UnknownKind(
            f"no follower registered for downstream kind {kind!r}; registered: {sorted(_followers)}"
        )
    return found


def follow(
    store: RunStore,
    run_id: str,
    stored: StoredRecord,
    *,
    timeout: float,
    seen_by: str,
    log_stream: TextIO | None = None,
) -> Downstream | None:
    """The run's downstream work as its API reports it now (None: the run started none).
    Asked only while the record says running; a change is recorded on the run (a write
    conditioned on `stored`), and a failed end logged, by the one caller whose write commits.
    Raises what the API raises when it does not answer, and UnknownKind."""
    known = Downstream.from_record(stored.fields)
    if known is None or not known.running:
        return known
    current = follower(known.kind)(known, timeout)
    if current.state is known.state:
        return current
    fields = {**current.fields(), DOWNSTREAM_CHECKED_AT: COMMIT_TIME}
    try:
        store.update(run_id, fields, if_updated_at=stored.update_time, timeout=timeout)
    except StaleWrite:
        return current  # changed meanwhile: whoever changed it recorded (and logged) it
    if current.state.failed:
        log_failed(stored.fields, run_id, current, seen_by=seen_by, log_stream=log_stream)
    return current


def log_failed(
    record: Mapping[str, Any],
    run_id: str,
    downstream: Downstream,
    *,
    seen_by: str,
    log_stream: TextIO | None = None,
) -> None:
    """One ERROR line for a downstream execution that failed or was cancelled, with the
    API's error: what the stack's downstream-failure alert counts."""
    job = record.get("job_name")
    schedule_time = record.get("schedule_time")
    when = format_rfc3339(schedule_time) if isinstance(schedule_time, datetime) else None
    fields: dict[str, Any] = {
        log_fields.EVENT: log_fields.DOWNSTREAM_FAILED,
        log_fields.JOB: job,
        log_fields.RUN_ID: run_id,
        log_fields.SCHEDULE_TIME: when,
        **downstream.fields(),
        "seen_by": seen_by,
    }
    what = f"{downstream.kind} {downstream.name} {downstream.state.value}"
    error = f": {downstream.error}" if downstream.error else ""
    message = f"{log_fields.DOWNSTREAM_FAILED}: job {job} run {run_id}: {what}{error}"
    structured_log.emit("ERROR", message, fields, log_stream)
