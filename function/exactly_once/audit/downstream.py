"""The audit's second task: follow every run whose downstream work the ledger still records
as running, to its end, through each kind's official client (delivery/following.py).

A proxy run completes once its work has started; what the work came to is learned by asking
its API later. A `skip` or `wait` job's next run asks about the previous run's work; nothing
else asks about the work of an `allow` job, or of the last run before a quiet spell. So the
stack's audit job asks, every audit interval, about every run whose record still says
`running`: one query on the runs collection (an equality filter: the automatic single-field
index serves it), then one API call per such run. An ended piece of work is recorded on its
run; a failed or cancelled one is logged `downstream_failed`, the line the stack alerts on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Final, TextIO

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from exactly_once import log_fields, structured_log
from exactly_once.delivery.following import follow
from exactly_once.errors import error_text
from exactly_once.ledger.downstream import DOWNSTREAM_NAME, DOWNSTREAM_STATE, DownstreamState
from exactly_once.ledger.store import FirestoreRunStore, StoredRecord

# Runs followed per audit run at most, oldest claim first being no concern: a run left out
# is followed by the next audit. Each costs one API call.
MAX_FOLLOWED: Final = 200
# One API call (and the write recording its answer) may take this long...
CALL_SECONDS: Final = 10.0
# ...and none is started with less than this left of the audit's own attempt.
RESERVE_SECONDS: Final = 2 * CALL_SECONDS


def follow_running_work(
    client: firestore.Client,
    collection: str,
    *,
    seconds_left: Callable[[], float],
    audit_run_id: str,
    stream: TextIO | None = None,
) -> Counter[str]:
    """Ask about each run still recorded `running`; what each came to, counted by state
    (plus "unanswered" for an API that did not answer and "not_asked" for runs left to the
    next audit), and logged in one summary line."""
    query = client.collection(collection).where(
        filter=FieldFilter(DOWNSTREAM_STATE, "==", DownstreamState.RUNNING.value)
    )
    snapshots = list(query.limit(MAX_FOLLOWED).stream(timeout=CALL_SECONDS))
    store = FirestoreRunStore(client, collection)
    counts: Counter[str] = Counter()
    for snapshot in snapshots:
        if seconds_left() < RESERVE_SECONDS:
            counts["not_asked"] += 1
            continue
        stored = StoredRecord(
            fields=snapshot.to_dict() or {},
            update_time=snapshot.update_time,
            read_time=snapshot.read_time,
            create_time=snapshot.create_time,
        )
        try:
            current = follow(
                store, snapshot.id, stored, timeout=CALL_SECONDS, seen_by="audit", log_stream=stream
            )
        except Exception as error:  # an API that does not answer: the next audit asks again
            counts["unanswered"] += 1
            _unanswered(snapshot.id, stored.fields, error, audit_run_id, stream)
            continue
        counts[current.state.value if current is not None else "not_asked"] += 1
    structured_log.emit(
        "WARNING" if counts[DownstreamState.FAILED] or counts[DownstreamState.CANCELLED] else "INFO",
        f"{log_fields.DOWNSTREAM_AUDIT}: {len(snapshots)} runs' downstream work followed: "
        + (", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none running"),
        {log_fields.EVENT: log_fields.DOWNSTREAM_AUDIT, "audit_run_id": audit_run_id, **counts},
        stream,
    )
    return counts


def _unanswered(
    run_id: str, record: Any, error: BaseException, audit_run_id: str, stream: TextIO | None
) -> None:
    name = record.get(DOWNSTREAM_NAME)
    structured_log.emit(
        "WARNING",
        f"could not ask about run {run_id}'s downstream work {name}: the next audit asks again",
        {
            log_fields.RUN_ID: run_id,
            DOWNSTREAM_NAME: name,
            "error": error_text(repr(error)),
            "audit_run_id": audit_run_id,
        },
        stream,
    )
