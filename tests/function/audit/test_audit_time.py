"""An audit reads for the time its attempt has left, never a count of runs: under a Firestore
that answers every read seconds late it judges less, completes inside its time limit, and the
next audit continues where it stopped; every run is judged once."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from exactly_once import RunContext
from exactly_once.audit.config import AuditConfig, AuditedJob
from exactly_once.audit.run import run_audit
from exactly_once.ledger.lifecycle import StoredRecord
from exactly_once.ledger.previous_run import PreviousRun
from exactly_once.run_key import RunKey, parse_rfc3339
from tests.support.audit_runs import refuse_to_send

JOBS = 60
TIME_LIMIT = 15.0
SLOW = 2.5  # every batched get answers this late
HOUR = datetime(2026, 10, 16, 12, tzinfo=UTC)
CONFIG = AuditConfig(
    jobs=tuple(
        AuditedJob(name=f"job-{index:02d}", schedule="* * * * *", time_zone="UTC", retry_window_seconds=60)
        for index in range(JOBS)
    ),
    interval_seconds=3600,
)


class SlowFirestore:
    """Every run completed; each read of a page of ids takes SLOW seconds on `now`."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.asked: list[str] = []

    def monotonic(self) -> float:
        return self.now

    def read(self, run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
        self.now += SLOW
        self.asked.extend(run_ids)
        done = {"status": "completed", "result": "succeeded", "expire_at": HOUR + timedelta(days=1)}
        return {run_id: StoredRecord(done, HOUR, HOUR + timedelta(hours=1)) for run_id in run_ids}


def audit(firestore: SlowFirestore, at: datetime, previous: dict[str, Any] | None) -> dict[str, Any]:
    context = RunContext(
        run_id=RunKey("acme", "europe-west1", "audit", at).run_id,
        job_name="audit",
        schedule_time=at,
        project="acme",
        location="europe-west1",
        attempt_id="a",
        fence=1,
        body=b"",
        claimed_at=at,
        ends_at=firestore.now + TIME_LIMIT,
        previous_reader=(lambda: PreviousRun(at, previous, "previous")) if previous is not None else None,
    )
    started = firestore.now
    output = run_audit(
        context,
        CONFIG,
        firestore.read,
        refuse_to_send,
        io.StringIO(),
        lease=timedelta(seconds=30),
        retention=timedelta(days=1),
        monotonic=firestore.monotonic,
    )
    # Its reads ended in time for the completing write, slow as that is too.
    assert firestore.now - started + SLOW <= TIME_LIMIT
    stored: dict[str, Any] = json.loads(json.dumps(output))
    return stored


def test_an_audit_under_a_slow_firestore_judges_what_fits_and_the_next_continues_from_there() -> None:
    firestore = SlowFirestore()
    first = audit(firestore, HOUR, None)
    assert 0 < first["judged"] < JOBS * 60
    assert "time to read ran out" in first["left_for_next"]["why"]
    judged_until = parse_rfc3339(first["judged_until"])
    assert HOUR - timedelta(hours=1) < judged_until < HOUR
    # The next audits continue exactly there until the backlog is judged, each run once.
    outputs = [first]
    at = HOUR
    while "left_for_next" in outputs[-1]:
        at += timedelta(minutes=1)
        outputs.append(audit(firestore, at, outputs[-1]))
        assert outputs[-1]["judged_from"] == outputs[-2]["judged_until"]
        assert len(outputs) < 20
    judged_ids = [run_id for run_id in firestore.asked if not run_id.startswith("audit")]
    expected = {
        RunKey("acme", "europe-west1", job.name, HOUR - timedelta(hours=1) + timedelta(minutes=minute)).run_id
        for job in CONFIG.jobs
        for minute in range(60)
    }
    assert expected <= set(judged_ids)
    assert sum(output["judged"] for output in outputs) == len(set(judged_ids) - own_runs(outputs))
    assert sum(output["missed"] for output in outputs) == 0


def own_runs(outputs: list[dict[str, Any]]) -> set[str]:
    """The audits' own run ids, read to find the stack's target (one per audit, never judged)."""
    return {
        RunKey("acme", "europe-west1", "audit", HOUR + timedelta(minutes=index)).run_id
        for index in range(len(outputs))
    }
