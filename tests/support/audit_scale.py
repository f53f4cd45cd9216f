"""An hour of a large stack's runs on the emulator, for the audit at scale: a stack of N jobs
that each run every minute, the ledger seeded as if every run of the audited hour completed
but a chosen few, and a count of what the audit reads. The scale test
(tests/ops/test_audit_scale.py) and `make bench` case 7 (bench/scale.py) share it, so the
bench measures exactly what the test proves correct.

The records are written in the form a completed run has (the ledger's own writers:
`in_progress_record`, then `lifecycle.completion_fields` over it), in batched writes of
Firestore's 500, so the audit judges them as it judges the function's.
"""

from __future__ import annotations

import contextlib
import copy
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from google.cloud import firestore
from google.cloud.firestore_v1.base_document import DocumentSnapshot
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.types import BatchGetDocumentsResponse

from exactly_once.audit.config import AuditConfig
from exactly_once.audit.missed_runs import runs_whose_window_closed
from exactly_once.audit.reads import firestore_api
from exactly_once.delivery.scheduler_request import RunKey, parse_rfc3339
from exactly_once.ledger import lifecycle
from exactly_once.ledger.lifecycle import StoredRecord
from exactly_once.ledger.records import in_progress_record
from exactly_once.ledger.store import COMMIT_TIME
from infra.plan.audit_job import AUDIT_MINUTE, audit_config, with_audit_job
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.loading import settings_from_config
from infra.settings.stack import StackSettings
from tests.support.audit_runs import AuditOutcome, ledger_reader, refuse_to_send, run_in_process
from tools.scale_stack import SCALE_HANDLER

# Firestore's most writes in one batched write.
BATCH_WRITES = 500


def minutely_settings(jobs: int) -> StackSettings:
    """A stack of `jobs` ordinary jobs that each run every minute, with the audit job added,
    through every check the stack's config gets."""
    values = {
        "functionTimeoutSeconds": 60,
        "jobs": [
            {"name": f"job-{index:04d}", "schedule": "* * * * *", "handler": SCALE_HANDLER}
            for index in range(jobs)
        ],
    }
    settings = settings_from_config(
        values, project="acme-scale", region="europe-west1", stack="prod", namespace="eos"
    )
    return with_audit_job(settings)


def audit_time(during: datetime) -> datetime:
    """The audit run of the hour `during` falls in (at the stack's audit minute)."""
    return during.replace(minute=AUDIT_MINUTE, second=0, microsecond=0)


def hour_runs(config: AuditConfig, since: datetime, until: datetime) -> list[tuple[str, datetime]]:
    """(deployed job, schedule time) of every run whose retry window closed in (since, until]:
    what an audit of that span judges, in job order."""
    return [
        (job.name, fire.instant)
        for job in config.jobs
        for fire in runs_whose_window_closed(job, after=since, up_to=until)
    ]


def completed_record(settings: StackSettings, key: RunKey, now: datetime) -> dict[str, Any]:
    """The fields of a run the function claimed and completed (succeeded): the claim's whole
    record with the completing write's fields over it."""
    lease = timedelta(seconds=settings.lease_seconds)
    retention = timedelta(seconds=settings.retention_seconds)
    claimed = in_progress_record(key, uuid.uuid4().hex, now, lease=lease, retention=retention)
    completed = lifecycle.completion_fields(
        lifecycle.JobResult.SUCCEEDED,
        error=None,
        output_json=None,
        expire_at=now + retention,
        commit_time=COMMIT_TIME,
    )
    return {**claimed, **completed}


def seed_completed(
    db: firestore.Client,
    settings: StackSettings,
    runs: Sequence[tuple[str, datetime]],
    *,
    now: datetime,
) -> int:
    """Write a completed record for each of `runs`, BATCH_WRITES to a commit; returns the
    commits. `now` dates the records' retention, which the audit reads on Firestore's clock:
    the time of the seeding, or the records may count as expired already."""
    collection = db.collection(settings.runs_collection)
    commits = 0
    for start in range(0, len(runs), BATCH_WRITES):
        batch = db.batch()
        for job, schedule_time in runs[start : start + BATCH_WRITES]:
            key = RunKey(settings.project, settings.region, job, schedule_time)
            batch.set(collection.document(key.run_id), completed_record(settings, key, now))
        batch.commit()
        commits += 1
    return commits


@dataclass
class ReadCount:
    """What the audit asked Firestore for: batched gets (pages) and the documents in them; and
    what it must never do per record it reads (the client library's way, which cost it most of
    its CPU): build a DocumentSnapshot, copy a record whole (`to_dict`), deep-copy anything."""

    pages: int = 0
    documents: int = 0
    page_sizes: list[int] = field(default_factory=list)
    snapshots: int = 0
    whole_copies: int = 0
    deep_copies: int = 0


@contextlib.contextmanager
def counting_copies(count: ReadCount) -> Iterator[None]:
    """Count snapshots built, records copied whole and deep copies while the block runs."""
    with (
        mock.patch.object(
            DocumentSnapshot, "__init__", autospec=True, side_effect=DocumentSnapshot.__init__
        ) as snapshots,
        mock.patch.object(
            DocumentSnapshot, "to_dict", autospec=True, side_effect=DocumentSnapshot.to_dict
        ) as whole,
        mock.patch("copy.deepcopy", wraps=copy.deepcopy) as deep,
    ):
        try:
            yield
        finally:
            count.snapshots += snapshots.call_count
            count.whole_copies += whole.call_count
            count.deep_copies += deep.call_count


class CountingApi(FirestoreClient):
    """Firestore's generated client on the emulator, counting its batched gets: the audit's only
    reads of run records (exactly_once/audit/reads.py)."""

    def __init__(self, count: ReadCount) -> None:
        super().__init__(transport=firestore_api().transport)
        self.count = count

    def batch_get_documents(self, request: Any = None, **kwargs: Any) -> Iterable[BatchGetDocumentsResponse]:
        asked = len(request.documents)
        self.count.pages += 1
        self.count.documents += asked
        self.count.page_sizes.append(asked)
        return super().batch_get_documents(request=request, **kwargs)


def scattered_missing(
    runs: Sequence[tuple[str, datetime]], jobs: Collection[str], count: int
) -> set[tuple[str, datetime]]:
    """`count` runs of `jobs` spread over jobs and minutes, the hour's first and last minutes
    among them: the ones left undelivered."""
    ordinary = sorted(run for run in runs if run[0] in jobs)
    times = sorted({instant for _, instant in ordinary})
    names = sorted({name for name, _ in ordinary})
    chosen = {(names[0], times[0]), (names[-1], times[-1]), (names[len(names) // 2], times[-1])}
    step = 0
    while len(chosen) < count:
        # A stride through jobs and minutes that share no factor: different jobs, different minutes.
        name = names[(step * 37 + 11) % len(names)]
        instant = times[(step * 7 + 3) % len(times)]
        chosen.add((name, instant))
        step += 1
    return chosen


@dataclass(frozen=True)
class HourAudited:
    """One audit of an hour of `minutely_settings(jobs)`: what it was given and what it did."""

    settings: StackSettings
    runs: list[tuple[str, datetime]]  # every run the hour's audit judges
    missing: set[tuple[str, datetime]]  # the runs seeded as never delivered
    commits: int  # batched writes that seeded the rest
    seed_seconds: float
    outcome: AuditOutcome
    reads: ReadCount
    seconds: float  # the audit's wall-clock time
    cpu_seconds: float  # the audit's CPU time in this process (every thread's)


def audit_an_hour(project: str, jobs: int, missing: int) -> HourAudited:
    """Seed the hour before an audit run a few hours ago on the emulator's `project` (every run
    completed but `missing` scattered ones), then run that audit as the audit job runs it, on a
    client that counts its reads. FIRESTORE_EMULATOR_HOST must name the emulator."""
    settings = minutely_settings(jobs)
    config = audit_config(settings)
    audit_job = settings.scheduler_job_id(AUDIT_JOB_NAME)
    # An hour of a few hours ago: its records, written now, are well inside their retention
    # when the audit reads them.
    when = audit_time(datetime.now(UTC) - timedelta(hours=3))
    runs = hour_runs(config, when - timedelta(hours=1), when)
    ordinary = {job.name for job in config.jobs if job.name != audit_job}
    left_out = scattered_missing(runs, ordinary, missing)
    started = time.perf_counter()
    commits = seed_completed(
        firestore.Client(project=project),
        settings,
        [run for run in runs if run not in left_out],
        now=datetime.now(UTC),
    )
    seed_seconds = time.perf_counter() - started
    outcome, reads, seconds, cpu_seconds = audit_seeded_hour(project, settings, when)
    return HourAudited(settings, runs, left_out, commits, seed_seconds, outcome, reads, seconds, cpu_seconds)


def audit_seeded_hour(
    project: str, settings: StackSettings, when: datetime
) -> tuple[AuditOutcome, ReadCount, float, float]:
    """The audit run at `when` of the hour `audit_an_hour` seeded for `settings`, on a client
    that counts its reads; with its wall-clock and CPU seconds in this process. It only reads,
    so the same hour can be audited again (the bench does, in a process with a CPU quota)."""
    config, audit_job = audit_config(settings), settings.scheduler_job_id(AUDIT_JOB_NAME)
    reads = ReadCount()
    reader = ledger_reader(firestore.Client(project=project), settings.runs_collection, CountingApi(reads))
    with counting_copies(reads):
        started, cpu_started = time.perf_counter(), time.process_time()
        outcome = run_in_process(
            config,
            reader,
            refuse_to_send,
            project=settings.project,
            location=settings.region,
            job_name=audit_job,
            when=when,
            lease=timedelta(seconds=settings.lease_seconds),
            retention=timedelta(seconds=settings.retention_seconds),
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return outcome, reads, seconds, cpu_seconds


@dataclass(frozen=True)
class AuditsInSteps:
    """Audits of a backlog larger than each one's budget, each continuing from the last: what
    they were given, and which records each asked for (its own run's first)."""

    runs: list[tuple[str, datetime]]  # every run the audits judged between them
    missing: set[tuple[str, datetime]]
    run_ids: dict[str, tuple[str, datetime]]  # run id -> (job, schedule time) of `runs`
    outcomes: list[AuditOutcome]
    asked: list[list[str]]  # per audit: every run id it read, in order


def audit_in_steps(
    project: str, jobs: int, missing: int, *, budget: int, minutes_apart: int, audits: int
) -> AuditsInSteps:
    """An hour of `minutely_settings(jobs)` seeded (all completed but `missing` scattered runs),
    then up to `audits` audits `minutes_apart` apart, each judging at most `budget` runs and
    continuing from the one before, until one completes without leaving anything; every run
    whose window closes by the last of them is seeded, so only the missing ones are missed."""
    settings = minutely_settings(jobs)
    config = audit_config(settings)
    audit_job = settings.scheduler_job_id(AUDIT_JOB_NAME)
    when = audit_time(datetime.now(UTC) - timedelta(hours=3))
    last = when + timedelta(minutes=minutes_apart * (audits - 1))
    seeded = hour_runs(config, when - timedelta(hours=1), last)
    ordinary = {job.name for job in config.jobs if job.name != audit_job}
    left_out = scattered_missing(hour_runs(config, when - timedelta(hours=1), when), ordinary, missing)
    seed_completed(
        firestore.Client(project=project),
        settings,
        [run for run in seeded if run not in left_out],
        now=datetime.now(UTC),
    )
    reader = ledger_reader(firestore.Client(project=project), settings.runs_collection)
    asked: list[list[str]] = []

    def read(run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
        asked[-1].extend(run_ids)
        return reader(run_ids)

    outcomes: list[AuditOutcome] = []
    for step in range(audits):
        asked.append([])
        outcomes.append(
            run_in_process(
                config,
                read,
                refuse_to_send,
                project=settings.project,
                location=settings.region,
                job_name=audit_job,
                when=when + timedelta(minutes=minutes_apart * step),
                lease=timedelta(seconds=settings.lease_seconds),
                retention=timedelta(seconds=settings.retention_seconds),
                previous=outcomes[-1] if outcomes else None,
                max_runs=budget,
            )
        )
        if "left_for_next" not in outcomes[-1].output:
            break
    # What the audits judge between them: every run whose window closed by where the last stopped.
    runs = hour_runs(config, when - timedelta(hours=1), parse_rfc3339(outcomes[-1].output["judged_until"]))
    ids = {RunKey(settings.project, settings.region, job, at).run_id: (job, at) for job, at in runs}
    return AuditsInSteps(runs, left_out, ids, outcomes, asked)
