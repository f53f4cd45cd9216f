"""One missed-run audit run in this process, on a clock and a previous run the test chooses
(`exactly_once.audit.run.run_audit`), and readers and senders in memory for it. Only the
function package: these serve the tests that run on the function's own Python too."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.services.firestore import FirestoreClient

from exactly_once import RunContext
from exactly_once.audit.config import AuditConfig, AuditedJob
from exactly_once.audit.missed_runs import RecordReader
from exactly_once.audit.reads import AUDIT_FIELDS, database_name, firestore_api, firestore_reader, projected
from exactly_once.audit.redelivery import RedeliveryError, Sender
from exactly_once.audit.run import run_audit
from exactly_once.config import DEFAULT_DATABASE
from exactly_once.delivery.scheduler_request import RunKey, format_rfc3339
from exactly_once.ledger.lifecycle import StoredRecord
from exactly_once.ledger.previous_run import PreviousRun


@dataclass(frozen=True)
class AuditOutcome:
    """One audit run: its run id, the time it was scheduled at, its output (as the ledger
    would store it: JSON), and the structured lines it wrote."""

    run_id: str
    schedule_time: datetime
    output: dict[str, Any]
    lines: list[dict[str, Any]]

    def events(self, event: str) -> list[dict[str, Any]]:
        """Its lines of `event` (missed_run, catchup_delivery, audit_job_error, ...)."""
        return [line for line in self.lines if line.get("event") == event]

    def missed(self) -> set[tuple[str, str]]:
        """(deployed job name, schedule time) of every `missed_run` line."""
        return {(str(line["job"]), str(line["schedule_time"])) for line in self.events("missed_run")}

    def caught_up(self) -> list[str]:
        """The schedule times its output lists as delivered again, in its order."""
        return [str(entry["schedule_time"]) for entry in self.output["caught_up"]]

    def as_previous(self) -> PreviousRun:
        """This run as the next audit's `RunContext.previous()` reads it from the job status."""
        return PreviousRun(schedule_time=self.schedule_time, output=self.output, run_id=self.run_id)


def run_in_process(
    config: AuditConfig,
    read_records: RecordReader,
    send: Sender,
    *,
    project: str,
    location: str,
    job_name: str,
    when: datetime,
    lease: timedelta,
    retention: timedelta,
    previous: AuditOutcome | None = None,
    horizon: datetime | None = None,
    max_runs: int | None = None,
) -> AuditOutcome:
    """One run of the audit job `job_name` scheduled at `when`, whose claim committed at
        `horizon` (by default `when`), continuing from `previous` (None: a first audit), judging at
    most `max_runs` runs (None: the budget of an attempt without a deadline, no limit)."""
    run_id = RunKey(project, location, job_name, when).run_id
    context = RunContext(
        run_id=run_id,
        job_name=job_name,
        schedule_time=when,
        project=project,
        location=location,
        attempt_id="in-process-audit",
        fence=1,
        body=b"",
        claimed_at=horizon or when,
        previous_reader=(lambda: previous.as_previous()) if previous is not None else None,
    )
    stream = io.StringIO()
    output = run_audit(
        context, config, read_records, send, stream, lease=lease, retention=retention, max_runs=max_runs
    )
    # As the ledger stores it, and as the next audit reads it back: JSON.
    stored = json.loads(json.dumps(output))
    lines = [json.loads(text) for text in stream.getvalue().splitlines() if text.startswith("{")]
    return AuditOutcome(run_id, when, stored, lines)


def refuse_to_send(job: AuditedJob, schedule_time: datetime) -> str:
    """The sender of a stack without catch-up: any delivery is the test's failure."""
    raise AssertionError(f"the audit delivered {job.name} at {format_rfc3339(schedule_time)} again")


def ledger_reader(
    db: firestore.Client,
    collection: str,
    api: FirestoreClient | None = None,
    *,
    field_paths: Sequence[str] | None = AUDIT_FIELDS,
) -> RecordReader:
    """The audit's reader (audit/reads.py) of `collection` in the default database of `db`'s
    project, through `api` (by default one on the emulator FIRESTORE_EMULATOR_HOST names)."""
    database = database_name(db.project, DEFAULT_DATABASE)
    return firestore_reader(api or firestore_api(), database, collection, field_paths=field_paths)


# ---- Readers and senders on memory, for the logic tests -------------------------------------


def reader_of(records: Mapping[str, StoredRecord], asked: list[list[str]] | None = None) -> RecordReader:
    """A RecordReader on `records` (by run id), projected to the fields the audit reads in the
    cloud (a verdict cannot pass here on a field Firestore would not return); each batch of ids
    asked is added to `asked`."""

    def read(run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
        if asked is not None:
            asked.append(list(run_ids))
        return {
            run_id: replace(records[run_id], fields=projected(records[run_id].fields, AUDIT_FIELDS))
            for run_id in run_ids
            if run_id in records
        }

    return read


@dataclass
class RecordingSender:
    """A Sender that records what it was asked to deliver; a time in `refuse` is refused."""

    refuse: set[datetime] = field(default_factory=set)
    sent: list[tuple[str, datetime]] = field(default_factory=list)

    def __call__(self, job: AuditedJob, schedule_time: datetime) -> str:
        if schedule_time in self.refuse:
            raise RedeliveryError("refused (scripted)")
        self.sent.append((job.name, schedule_time))
        return f"recorded #{len(self.sent)}"
