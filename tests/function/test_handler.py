"""Every outcome of one delivery, through ScheduledRunHandler on the Firestore emulator."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from google.api_core import exceptions as google_exceptions
from handler import ScheduledRunHandler
from job_api import JobRouter
from ledger import FirestoreRunStore, RunLedger
from scheduler_request import run_key_from_headers

from tests.function import sample_jobs
from tests.function.test_ledger import Clock

HEADERS = {
    "x-cloudscheduler-jobname": "nightly",
    "x-cloudscheduler-scheduletime": "2026-10-16T12:00:00Z",
    "x-job-project": "acme",
    "x-job-location": "europe-west1",
}
LEASE = timedelta(seconds=70)


class Harness:
    def __init__(self, db, handler_spec: str, store=None) -> None:
        self.db = db
        self.clock = Clock()
        self.ledger = RunLedger(
            store or FirestoreRunStore(db, "scheduler_runs"),
            lease=LEASE,
            retention=timedelta(hours=1),
            clock=self.clock,
        )
        self.logs = io.StringIO()
        counter = iter(range(1, 1000))
        self.handler = ScheduledRunHandler(
            self.ledger,
            JobRouter(handler_spec, {}),
            db,
            new_attempt_id=lambda: f"attempt-{next(counter)}",
            log_stream=self.logs,
        )

    def deliver(self, headers=HEADERS, body=b""):
        return self.handler.handle(headers, body)

    def log_lines(self):
        return [json.loads(line) for line in self.logs.getvalue().splitlines()]

    def runs(self):
        return list(self.db.collection("scheduler_runs").stream())


@pytest.fixture(autouse=True)
def clear_calls():
    sample_jobs.CALLS.clear()
    yield
    sample_jobs.DURING_JOB = None


@pytest.fixture
def harness(db):
    return Harness(db, "tests.function.sample_jobs:record_call")


def test_first_delivery_executes_and_duplicate_is_skipped(harness):
    first = harness.deliver(body=b'{"x": 1}')
    assert (first.status, first.body["outcome"]) == (200, "executed")
    second = harness.deliver()
    assert (second.status, second.body["outcome"]) == (200, "duplicate_completed")
    assert len(sample_jobs.CALLS) == 1
    context = sample_jobs.CALLS[0]
    assert context.body == b'{"x": 1}'
    assert (context.job_name, context.project, context.location) == ("nightly", "acme", "europe-west1")
    assert context.fence == first.body["fence"] and context.attempt_id == "attempt-1"


def test_live_lease_answers_409_with_retry_after(harness):
    harness.ledger.claim(run_key_from_headers(HEADERS), "crashed-attempt")
    harness.clock.advance(timedelta(seconds=20))
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (409, "in_progress")
    assert reply.headers == {"Retry-After": "50"}
    assert sample_jobs.CALLS == []


def test_crashed_attempt_is_taken_over_after_its_lease(harness):
    stale = harness.ledger.claim(run_key_from_headers(HEADERS), "crashed-attempt")
    harness.clock.advance(LEASE + timedelta(seconds=1))
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (200, "lease_taken_over")
    assert reply.body["fence"] > stale.fence
    assert len(sample_jobs.CALLS) == 1
    assert harness.log_lines()[-1]["severity"] == "WARNING"


def test_retryable_failure_releases_and_answers_500(db):
    harness = Harness(db, "tests.function.sample_jobs:fail_retryable")
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (500, "failed_released")
    assert harness.runs() == []  # released: the next retry claims at once
    line = harness.log_lines()[-1]
    assert line["severity"] == "ERROR" and "downstream timed out" in line["error"]


def test_next_delivery_after_a_failure_runs_the_job(db):
    failing = Harness(db, "tests.function.sample_jobs:fail_retryable")
    assert failing.deliver().status == 500
    healthy = Harness(db, "tests.function.sample_jobs:record_call")
    assert healthy.deliver().body["outcome"] == "executed"
    assert len(sample_jobs.CALLS) == 1


def test_terminal_failure_is_recorded_and_not_retried(db):
    harness = Harness(db, "tests.function.sample_jobs:fail_terminal")
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (200, "failed_terminal")
    (run,) = harness.runs()
    assert run.to_dict()["result"] == "terminal_failure"
    again = harness.deliver()
    assert (again.status, again.body["outcome"]) == (200, "duplicate_completed")


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({}, "X-CloudScheduler-JobName"),
        ({"x-cloudscheduler-jobname": "nightly"}, "X-CloudScheduler-ScheduleTime"),
        ({**HEADERS, "x-cloudscheduler-scheduletime": "yesterday"}, "X-CloudScheduler-ScheduleTime"),
    ],
)
def test_bad_request_names_the_header_and_writes_nothing(harness, headers, named):
    reply = harness.deliver(headers=headers)
    assert (reply.status, reply.body["outcome"]) == (400, "bad_request")
    assert named in reply.body["message"]
    assert harness.runs() == []
    assert sample_jobs.CALLS == []


def test_one_structured_log_line_per_request(harness):
    harness.deliver()
    harness.deliver()
    harness.deliver(headers={})
    lines = harness.log_lines()
    assert [line["outcome"] for line in lines] == ["executed", "duplicate_completed", "bad_request"]
    executed = lines[0]
    for field in (
        "severity",
        "message",
        "run_id",
        "attempt_id",
        "fence",
        "job",
        "schedule_time",
        "latency_ms",
    ):
        assert field in executed, field
    assert executed["schedule_time"] == "2026-10-16T12:00:00Z"
    assert executed["severity"] == "INFO"


def test_finishing_after_a_takeover_is_refused_as_lease_lost(db):
    """The job outlives its lease and a retry takes over meanwhile: the slow attempt's finish
    must not overwrite the new owner's record."""
    harness = Harness(db, "tests.function.sample_jobs:run_hook")

    def usurp(context):
        harness.clock.advance(LEASE + timedelta(seconds=1))
        harness.ledger.claim(run_key_from_headers(HEADERS), "usurper")

    sample_jobs.DURING_JOB = usurp
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (409, "lease_lost")
    (run,) = harness.runs()
    assert (run.to_dict()["status"], run.to_dict()["attempt_id"]) == ("in_progress", "usurper")
    assert harness.log_lines()[-1]["severity"] == "ERROR"


class CompleteFails(FirestoreRunStore):
    """The real store on the emulator, with Firestore failing the completion write."""

    def update(self, run_id, fields, *, if_updated_at):
        if fields.get("status") == "completed":
            raise google_exceptions.ServiceUnavailable("injected")
        return super().update(run_id, fields, if_updated_at=if_updated_at)


def test_store_failure_answers_500_not_503(db):
    harness = Harness(db, "tests.function.sample_jobs:record_call", store=CompleteFails(db, "scheduler_runs"))
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (500, "store_error")
    assert "injected" in harness.log_lines()[-1]["error"]
