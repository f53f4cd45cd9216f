"""Every outcome of one delivery, through ScheduledRunHandler on the Firestore emulator."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from google.api_core import exceptions as google_exceptions

from exactly_once.delivery.handler import MAX_BODY_BYTES
from exactly_once.delivery.outcomes import unavailable_reply
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from exactly_once.ledger.fields import RENEWED_AT
from exactly_once.ledger.store import FirestoreRunStore
from tests.function import sample_jobs
from tests.support.handler_harness import HEADERS, Harness
from tests.support.ledger_runs import SHORT_LEASE, DelayedCreate


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
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (409, "in_progress")
    assert 60 <= int(reply.headers["Retry-After"]) <= 70
    assert sample_jobs.CALLS == []


def test_crashed_attempt_is_taken_over_after_its_lease(db):
    harness = Harness(db, "tests.function.sample_jobs:record_call", lease=SHORT_LEASE)
    stale = harness.ledger.claim(run_key_from_headers(HEADERS), "crashed-attempt")
    reply = harness.deliver_when_free()
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
        ({}, JOB_NAME_HEADER),
        ({JOB_NAME_HEADER.lower(): "nightly"}, SCHEDULE_TIME_HEADER),
        ({**HEADERS, SCHEDULE_TIME_HEADER.lower(): "yesterday"}, SCHEDULE_TIME_HEADER),
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
    # Whether this delivery ran the job: only the one that did says so.
    assert [line.get("job_returned") for line in lines] == [True, None, None]


class RenewalsFail(FirestoreRunStore):
    """The real store, with every lease renewal failing: an instance cut off from Firestore
    while its job runs (other instances still reach it)."""

    def update(self, run_id, fields, *, if_updated_at, timeout, also=()):
        if RENEWED_AT in fields:
            raise google_exceptions.ServiceUnavailable("injected: renewal")
        return super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)


def test_finishing_after_a_takeover_is_refused_as_lease_lost(db):
    """An attempt that cannot renew its lease is ended by its watchdog before the lease can
    run out; here the attempt lives on (in-process, the watchdog only records), a retry takes
    over, and the stale attempt's finish must not overwrite the new owner's record."""
    store = RenewalsFail(db, "scheduler_runs")
    harness = Harness(db, "tests.function.sample_jobs:run_hook", store=store, lease=SHORT_LEASE)
    rival = Harness(db, "tests.function.sample_jobs:record_call", lease=SHORT_LEASE, name="rival")

    def usurp(context):
        harness.ended.ended.wait(timeout=30)
        rival.deliver_when_free()

    sample_jobs.DURING_JOB = usurp
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (409, "lease_lost")
    assert [reason[:27] for reason in harness.ended.reasons] == ["no lease renewal was confir"]
    (run,) = harness.runs()
    assert run.to_dict()["status"] == "completed"  # by the rival, whose record stands
    assert run.to_dict()["attempt_id"] == rival.log_lines()[-1]["attempt_id"]
    assert harness.log_lines()[-1]["severity"] == "ERROR"
    ended = next(line for line in harness.log_lines() if line.get("event") == "attempt_ended")
    assert ended["severity"] == "CRITICAL" and "renewal_error" in ended


class CompleteFails(FirestoreRunStore):
    """The real store on the emulator, with Firestore failing the completion write."""

    def update(self, run_id, fields, *, if_updated_at, timeout, also=()):
        if fields.get("status") == "completed":
            raise google_exceptions.ServiceUnavailable("injected")
        return super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)


def test_store_failure_answers_500_not_503(db):
    harness = Harness(db, "tests.function.sample_jobs:record_call", store=CompleteFails(db, "scheduler_runs"))
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (500, "store_error")
    line = harness.log_lines()[-1]
    assert "injected" in line["error"]
    # The job ran, its completion was not recorded: a retry will run it again, and the line says so.
    assert line["job_returned"] is True and len(sample_jobs.CALLS) == 1


def test_a_job_that_raised_is_logged_as_not_returned(db):
    harness = Harness(db, "tests.function.sample_jobs:fail_retryable")
    assert harness.deliver().body["outcome"] == "failed_released"
    assert harness.log_lines()[-1]["job_returned"] is False


class Broken(FirestoreRunStore):
    """A store with a bug: an exception nobody planned for."""

    def create(self, run_id, fields, *, timeout):
        raise RuntimeError("a bug")


def test_an_unexpected_error_still_answers_json_and_logs_the_line(db):
    harness = Harness(db, "tests.function.sample_jobs:record_call", store=Broken(db, "scheduler_runs"))
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (500, "internal_error")
    line = harness.log_lines()[-1]
    assert (line["outcome"], line["severity"]) == ("internal_error", "ERROR")
    assert "a bug" in line["error"] and "Traceback" in line["traceback"]
    assert sample_jobs.CALLS == []


def test_a_claim_confirmed_too_late_does_not_run_the_job(db):
    store = DelayedCreate(db, "scheduler_runs")
    harness = Harness(db, "tests.function.sample_jobs:record_call", store=store, lease=timedelta(seconds=1))
    threading.Timer(1.0, store.answer.set).start()
    reply = harness.deliver()
    assert (reply.status, reply.body["outcome"]) == (500, "store_error")
    assert "not started" in reply.body["message"]
    assert sample_jobs.CALLS == []
    assert harness.runs() == []  # given back: the next retry runs at once


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
def test_only_post_runs_a_job(harness, method):
    reply = harness.deliver(method=method)
    assert (reply.status, reply.body["outcome"]) == (405, "method_not_allowed")
    assert reply.headers["Allow"] == "POST"
    assert harness.runs() == [] and sample_jobs.CALLS == []


def test_a_body_over_the_limit_is_413_and_writes_nothing(harness):
    reply = harness.deliver(body=b" " * (MAX_BODY_BYTES + 1))
    assert (reply.status, reply.body["outcome"]) == (413, "body_too_large")
    assert harness.runs() == [] and sample_jobs.CALLS == []
    assert harness.deliver(body=b" " * MAX_BODY_BYTES).body["outcome"] == "executed"


@pytest.mark.parametrize("schedule_time", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_schedule_times_outside_utc_range_are_400(harness, schedule_time):
    reply = harness.deliver(headers={**HEADERS, SCHEDULE_TIME_HEADER.lower(): schedule_time})
    assert (reply.status, reply.body["outcome"]) == (400, "bad_request")
    assert SCHEDULE_TIME_HEADER in reply.body["message"]
    assert harness.runs() == [] and sample_jobs.CALLS == []


def test_a_handler_that_cannot_be_built_still_answers_json(capsys):
    reply = unavailable_reply(RuntimeError("no credentials"))
    assert (reply.status, reply.body["outcome"]) == (500, "internal_error")
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (line["outcome"], line["severity"]) == ("internal_error", "ERROR")
    assert "no credentials" in line["error"]
