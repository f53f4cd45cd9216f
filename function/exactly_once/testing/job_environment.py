"""A job run as the function runs it, in memory: the helper a job's own tests call.

`JobEnvironment(job).run(body)` delivers one run of the job through the function's whole
delivery path (the claim, the checks before the job, the job, the completing commit with its
staged writes and the job's status) on an in-memory ledger (memory_store.MemoryRunStore, which
the Firestore store's conformance suite holds to Firestore's behaviour), and returns what came
of it: the answer, the job's output or error, its last checkpoint, the documents its
`context.writes` committed. No credentials, no emulator, no server: milliseconds a run. Its
previous result and an inherited checkpoint are given, as an earlier run would have left them.
Temporal's ActivityEnvironment is the model.

A job that reads or writes Firestore itself (through `exactly_once.firestore_client()`, not
`context.writes`) needs a Firestore: give the environment a client of the emulator
(`client=`; `make test` starts one, and its `db` fixture is such a client) and the whole run uses
it, ledger included. In memory, such a call is refused with FirestoreNeeded, which says so.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from exactly_once.config import JobPolicy
from exactly_once.context import JobHandler, RunContext, decode_checkpoint
from exactly_once.decorator import firestore_client
from exactly_once.delivery.handler import ScheduledRunHandler
from exactly_once.delivery.outcomes import Reply
from exactly_once.delivery.overlap import JobLocks
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
)
from exactly_once.ledger import lifecycle
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import RunLedger
from exactly_once.ledger.store import FirestoreRunStore, RunStore
from exactly_once.ledger.writes import StagedWrite, WriteKind
from exactly_once.run_key import RunKey, format_rfc3339
from exactly_once.run_writes import WriteScope
from exactly_once.testing.memory_store import MemoryRunStore, ServerClock

RUNS_COLLECTION = "scheduler_runs"
LEASE = timedelta(seconds=30)
RETENTION = timedelta(days=1)
# Where an environment's clock starts, in memory: a fixed instant, so a test's runs are the same
# runs every time it runs.
START = datetime(2026, 1, 5, 9, tzinfo=UTC)


class FirestoreNeeded(RuntimeError):
    """The job called Firestore itself while it ran in memory."""


class _NamingClient(firestore.Client):
    """Names documents for a job's `context.writes` in memory; any call to Firestore is refused,
    saying how to run the job on one."""

    def __init__(self, project: str) -> None:
        super().__init__(project=project, credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]

    @property
    def _firestore_api(self) -> Any:
        raise FirestoreNeeded(
            "the job called Firestore itself, and JobEnvironment runs it in memory, where only "
            "context.writes are kept: give it a client of the Firestore emulator, "
            "JobEnvironment(job, client=firestore.Client(project=...)) with FIRESTORE_EMULATOR_HOST "
            "set (make test starts one; its `db` fixture is such a client)"
        )


@dataclass(frozen=True)
class JobRun:
    """What one delivered run came to, as the function answered it and the ledger holds it."""

    run_id: str
    outcome: str  # executed, failed_released, failed_terminal, skipped_paused...
    output: Any  # what the job returned, as stored (None when it failed or returned nothing)
    error: str | None  # why it failed (a terminal failure's reason, a retryable one's repr)
    checkpoint: Any  # the last checkpoint the job saved in this attempt (None: none)
    # Each document the job's context.writes staged, as the completing commit left it; one it
    # deleted, or that nothing committed (the run did not complete), is not there.
    writes: Mapping[str, dict[str, Any]]
    reply: Reply = field(repr=False)


class JobEnvironment:
    """Runs of one job, delivered as Cloud Scheduler delivers them to the function: `job_name`
    is its deployed job id, `policy` its entry in the job table (time zone, time limit, starting
    deadline, overlap, pause after failures). `client`: a Firestore (the emulator's) to run on
    instead of memory."""

    _attempts = itertools.count(1)

    def __init__(
        self,
        job: JobHandler,
        *,
        job_name: str = "eos-test_job",
        policy: JobPolicy | None = None,
        project: str = "test-project",
        location: str = "europe-west1",
        time_limit_seconds: float = 60.0,
        client: firestore.Client | None = None,
    ) -> None:
        self.job_name, self.project, self.location = job_name, project, location
        self.ended: list[str] = []  # why the watchdog ended an attempt (a job past its time limit)
        self.logs = io.StringIO()
        self._job = job
        self._seen: RunContext | None = None
        self._client: firestore.Client = client if client is not None else _NamingClient(project)
        self.store: RunStore
        if client is None:
            self._memory: MemoryRunStore | None = MemoryRunStore(RUNS_COLLECTION, clock=ServerClock(START))
            self.store = self._memory
            clock, monotonic = self._memory.clock.now, self._memory.clock.monotonic
            ledger = RunLedger(self.store, lease=LEASE, retention=RETENTION, clock=clock, monotonic=monotonic)
        else:
            self._memory = None
            self.store = FirestoreRunStore(client, RUNS_COLLECTION)
            ledger = RunLedger(self.store, lease=LEASE, retention=RETENTION)
        policy = policy or JobPolicy()
        pausing = {job_name: policy.pause_after_failures} if policy.pause_after_failures else None
        statuses = JobStatuses(self.store, RUNS_COLLECTION, pausing)
        self._statuses = statuses
        self._handler = ScheduledRunHandler(
            ledger,
            self._seeing,
            new_attempt_id=lambda: f"test-attempt-{next(self._attempts)}",
            time_limit_seconds=time_limit_seconds,
            end_attempt=self.ended.append,
            jobs={job_name: policy},
            locks=JobLocks(
                self.store, lease=LEASE, retention=RETENTION, clock=ledger.clock, deadline_seconds=5
            ),
            statuses=statuses,
            log_stream=self.logs,
            write_scope=WriteScope.of(self._client, RUNS_COLLECTION),
            project=project,
        )

    def now(self) -> datetime:
        """The environment's clock: Firestore's in memory (it moves only when a run needs it
        to), the wall clock on the emulator."""
        return self._memory.clock.now() if self._memory is not None else datetime.now(UTC)

    def run(
        self,
        body: bytes | Mapping[str, Any] | None = None,
        *,
        at: datetime | None = None,
        previous: Any = None,
        previous_at: datetime | None = None,
        checkpoint: Any = None,
    ) -> JobRun:
        """Deliver the run scheduled `at` (by default the next whole minute of the environment's
        clock) with `body` (bytes as sent, or a mapping sent as JSON). `previous`: the output of
        the job's last successful run, which `context.previous()` returns (scheduled at
        `previous_at`, by default a day earlier); `checkpoint`: what an earlier attempt of this
        run saved, which `context.last_checkpoint` returns."""
        at = at if at is not None else _next_minute(self.now())
        key = RunKey(self.project, self.location, self.job_name, at)
        if previous is not None:
            earlier = RunKey(
                self.project, self.location, self.job_name, previous_at or at - timedelta(days=1)
            )
            self._commit(self._statuses.succeeded(earlier, earlier.run_id, json.dumps(previous)))
        if checkpoint is not None:
            released = lifecycle.release_fields(json.dumps(checkpoint))
            record = self.store.reference(f"{RUNS_COLLECTION}/{key.run_id}")
            self._commit(StagedWrite(WriteKind.SET, record, released or {}))
        if self._memory is not None and at > self._memory.clock.now():
            self._memory.clock.advance((at - self._memory.clock.now()).total_seconds())
        self._seen = None
        raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        logged = len(self.logs.getvalue())
        with firestore_client.given(self._client):
            reply = self._handler.handle("POST", self._headers(at), raw)
        # The delivery's own line (the last it wrote) says why a failed run failed, also when
        # its answer does not (a retryable failure is answered with its outcome alone).
        written = self.logs.getvalue()[logged:].splitlines()
        lines: list[dict[str, Any]] = [json.loads(line) for line in written if line.startswith("{")]
        delivery: dict[str, Any] = next((line for line in reversed(lines) if "outcome" in line), {})
        seen = self._seen
        staged: list[str] = (
            [write.document.path for write in seen.writes.staged()] if seen is not None else []
        )
        return JobRun(
            run_id=key.run_id,
            outcome=str(reply.body["outcome"]),
            output=reply.body.get("output"),
            error=reply.body.get("error") or delivery.get("error"),
            checkpoint=decode_checkpoint(seen.progress.latest()) if seen is not None else None,
            writes={path: found for path in staged if (found := self.document(path)) is not None},
            reply=reply,
        )

    def document(self, path: str) -> dict[str, Any] | None:
        """The document at `path` ("collection/id") as the runs so far left it."""
        found = self.store.read(path, timeout=10.0)
        return dict(found.fields) if found is not None else None

    def _seeing(self, context: RunContext) -> Any:
        self._seen = context
        return self._job(context)

    def _headers(self, at: datetime) -> dict[str, str]:
        return {
            JOB_NAME_HEADER: self.job_name,
            SCHEDULE_TIME_HEADER: format_rfc3339(at),
            PROJECT_HEADER: self.project,
            LOCATION_HEADER: self.location,
        }

    def _commit(self, write: StagedWrite) -> None:
        """Seed one document as an earlier run left it."""
        if self._memory is not None:
            self._memory.commit([write])
            return
        batch = self._client.batch()
        batch.set(write.document, dict(write.data), merge=write.merge)
        batch.commit()


def _next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
