"""One call timeout for every proxy, cut to what the attempt has left, and the Cloud Run
search's pages each asking for their own (the HTTP tests show the attempt released)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from exactly_once import RetryableJobError
from exactly_once.endpoints import ApiEndpoint
from exactly_once.targets.call_timeout import (
    CALL_MARGIN_SECONDS,
    CALL_TIMEOUT_SECONDS,
    MIN_CALL_SECONDS,
    call_timeout,
)
from jobs import cloud_run_job
from tests.support.fake_cloud_run import FakeCloudRun
from tests.support.run_contexts import run_context

JOB = "projects/acme/locations/europe-west1/jobs/nightly-export"


def test_a_call_gets_the_call_timeout_when_the_attempt_has_time_for_it() -> None:
    assert call_timeout(run_context(), "x") == CALL_TIMEOUT_SECONDS
    assert call_timeout(run_context(seconds_left=CALL_TIMEOUT_SECONDS * 10), "x") == CALL_TIMEOUT_SECONDS


def test_a_call_ends_a_margin_before_the_attempt_does() -> None:
    left = CALL_TIMEOUT_SECONDS / 2
    assert MIN_CALL_SECONDS <= call_timeout(run_context(seconds_left=left), "x") <= left - CALL_MARGIN_SECONDS


def test_a_call_of_a_step_ends_with_its_step() -> None:
    step = CALL_TIMEOUT_SECONDS / 3
    timeout = call_timeout(run_context(), "x", step_ends_at=time.monotonic() + step)
    assert MIN_CALL_SECONDS <= timeout <= step


def test_too_little_time_left_is_a_retryable_error_naming_the_call() -> None:
    with pytest.raises(RetryableJobError, match=r"^running the job: not called: .*s left of the attempt"):
        call_timeout(run_context(seconds_left=MIN_CALL_SECONDS + CALL_MARGIN_SECONDS / 2), "running the job")
    with pytest.raises(RetryableJobError, match=r"^listing: not called: .*the time its step may take"):
        call_timeout(run_context(), "listing", step_ends_at=time.monotonic() + MIN_CALL_SECONDS / 2)


@pytest.fixture
def fake():
    cloud_run = FakeCloudRun(jobs={JOB}).start()
    yield cloud_run
    cloud_run.stop()


def test_every_page_of_the_cloud_run_search_asks_for_its_own_timeout(fake: FakeCloudRun) -> None:
    """250 executions of other runs: three pages, three calls, each with a timeout asked for
    just before it; a timeout refused on the second page ends the search there."""
    now = datetime.now(UTC)
    for index in range(250):
        fake.seed(JOB, now - timedelta(seconds=index + 1))
    _, executions = cloud_run_job._new_clients(ApiEndpoint(fake.endpoint.removeprefix("http://"), True))
    asked: list[int] = []

    def timeout() -> float:
        asked.append(fake.list_pages)
        return CALL_TIMEOUT_SECONDS

    not_before = now - timedelta(days=1)
    assert cloud_run_job.execution_of_run(executions, JOB, "this-run", not_before, timeout) is None
    assert asked == [0, 1, 2] and fake.list_pages == 3

    before = fake.list_pages

    def spent() -> float:
        if fake.list_pages > before:
            raise RetryableJobError("the search's time is spent")
        return CALL_TIMEOUT_SECONDS

    with pytest.raises(RetryableJobError, match="spent"):
        cloud_run_job.execution_of_run(executions, JOB, "this-run", not_before, spent)
    assert fake.list_pages == before + 1
