"""The local Cloud Scheduler without an emulator: fire times, headers, retry waits, fault plans."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from datetime import datetime, timedelta

import pytest

from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from localrun.delivery import DeliveryDropped, DeliveryTimeout, HttpReply
from localrun.demo import load_settings
from localrun.faults import PRIMARY_FAULTS, Fault, FaultRates, RunFaults, fault_counts, plan_faults
from localrun.scheduler import ENDED, CompressedClock, LocalScheduler, fire_times, latest_fire_times
from policy.scheduler_guardrails.rules.timing import rules as timing
from policy.scheduler_guardrails.rules.timing.rules import RetryConfig
from tests.support.clock import FakeMonotonic


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_daily_berlin_fire_times_follow_the_spring_dst_change():
    # 03:00 Berlin is 02:00Z in winter (CET) and 01:00Z from 29 March 2026 (CEST).
    times = fire_times("0 3 * * *", "Europe/Berlin", utc("2026-03-27T12:00:00Z"), 4)
    assert times == [
        utc("2026-03-28T02:00:00Z"),
        utc("2026-03-29T01:00:00Z"),
        utc("2026-03-30T01:00:00Z"),
        utc("2026-03-31T01:00:00Z"),
    ]


def test_daily_berlin_fire_times_follow_the_autumn_dst_change():
    times = fire_times("0 3 * * *", "Europe/Berlin", utc("2026-10-23T12:00:00Z"), 3)
    assert times == [utc("2026-10-24T01:00:00Z"), utc("2026-10-25T02:00:00Z"), utc("2026-10-26T02:00:00Z")]


def test_a_wall_time_skipped_by_spring_forward_does_not_fire():
    times = fire_times("30 2 * * *", "Europe/Berlin", utc("2026-03-27T12:00:00Z"), 3)
    assert times == [utc("2026-03-28T01:30:00Z"), utc("2026-03-30T00:30:00Z"), utc("2026-03-31T00:30:00Z")]


def test_a_wall_time_repeated_by_fall_back_fires_once():
    # 01:30 CEST on 25 October; 02:00 local happens twice (00:00Z and 01:00Z).
    times = fire_times("0 * * * *", "Europe/Berlin", utc("2026-10-24T23:30:00Z"), 3)
    assert times == [utc("2026-10-25T00:00:00Z"), utc("2026-10-25T02:00:00Z"), utc("2026-10-25T03:00:00Z")]


def test_fire_times_are_utc_and_strictly_after_the_start():
    start = utc("2026-01-01T00:05:00Z")
    times = fire_times("*/5 * * * *", "Etc/UTC", start, 3)
    assert times == [utc("2026-01-01T00:10:00Z"), utc("2026-01-01T00:15:00Z"), utc("2026-01-01T00:20:00Z")]
    assert all(t.utcoffset() == timedelta(0) for t in times)


def test_the_local_run_delivers_the_latest_fire_times_up_to_now_oldest_first():
    """Past times, as Cloud Scheduler's deliveries carry them: a time ahead of the ledger's
    clock would be a forced run's."""
    before = utc("2026-01-01T00:05:00Z")
    assert latest_fire_times("*/5 * * * *", "Etc/UTC", before, 3) == [
        utc("2026-01-01T00:00:00Z") - timedelta(minutes=5),
        utc("2026-01-01T00:00:00Z"),
        before,
    ]
    # A schedule rarer than the first span looked at: the search widens until it has them all.
    yearly = latest_fire_times("0 0 1 1 *", "Etc/UTC", before, 3)
    assert yearly == [utc("2024-01-01T00:00:00Z"), utc("2025-01-01T00:00:00Z"), utc("2026-01-01T00:00:00Z")]
    assert latest_fire_times("*/5 * * * *", "Etc/UTC", before, 0) == []


class RecordingTransport:
    def __init__(self, *replies: HttpReply | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, dict[str, str], bytes, float]] = []

    def post(self, url, headers, body, timeout):
        self.requests.append((url, dict(headers), body, timeout))
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply


@pytest.fixture
def settings():
    return load_settings(None)


def scheduler_for(settings, job, transport, fake, speedup=60.0):
    clock = CompressedClock(speedup, monotonic=fake.monotonic, sleep=fake.sleep)
    return LocalScheduler(settings, job, "http://127.0.0.1:1/", clock=clock, transport=transport)


def test_deliveries_carry_cloud_scheduler_and_stack_headers(settings):
    job = settings.jobs[0]
    transport = RecordingTransport(HttpReply(500, "failed_released"), HttpReply(200, "executed"))
    scheduler = scheduler_for(settings, job, transport, FakeMonotonic())
    result = scheduler.run(0, utc("2026-10-16T12:05:00Z"))

    assert result.acknowledged and [d.status for d in result.deliveries] == [500, 200]
    (first_headers, retry_headers) = [headers for _, headers, _, _ in transport.requests]
    assert (
        first_headers
        == retry_headers
        == {
            JOB_NAME_HEADER: settings.scheduler_job_id(job),
            SCHEDULE_TIME_HEADER: "2026-10-16T12:05:00Z",
            PROJECT_HEADER: settings.project,
            LOCATION_HEADER: settings.region,
            "Content-Type": "application/json",
        }
    )
    # The function identifies the run from exactly these headers.
    key = run_key_from_headers(first_headers)
    assert (key.project, key.location) == (settings.project, settings.region)
    assert key.job_name == settings.scheduler_job_id(job) == f"eos-demo_{job.name}"
    assert key.schedule_time == utc("2026-10-16T12:05:00Z")


@pytest.mark.parametrize("speedup", [1.0, 20.0])
def test_attempt_deadline_follows_the_function_timeout_and_body_durations_are_compressed(settings, speedup):
    job = settings.jobs[0]
    transport = RecordingTransport(HttpReply(200, "executed"))
    scheduler = scheduler_for(settings, job, transport, FakeMonotonic(), speedup=speedup)
    scheduler.run(0, utc("2026-10-16T12:05:00Z"))
    (_, _, body, timeout) = transport.requests[0]
    # Lengthened as much as the function timeout (floored for a slow Firestore), never shorter.
    assert timeout == scheduler.compressed.attempt_deadline_seconds(settings, job)
    assert timeout >= job.attempt_deadline_seconds / speedup
    if speedup == 1.0:
        assert timeout == job.attempt_deadline_seconds
    assert body == b'{"sleep_seconds":%r}' % (job.body["sleep_seconds"] / speedup)


def test_a_slow_job_hangs_past_the_function_timeout_a_crashed_one_ends_inside_its_time_limit(settings):
    scheduler = scheduler_for(
        settings, settings.jobs[0], RecordingTransport(HttpReply(200, "?")), FakeMonotonic()
    )
    timing = scheduler.compressed
    slow = json.loads(scheduler.body_for([Fault.SLOW]))["sleep_seconds"]
    crash = json.loads(scheduler.body_for([Fault.CRASH]))["sleep_seconds"]
    assert slow > timing.function_timeout_seconds > timing.time_limit_seconds > crash > 0


class RecordingRouter:
    """Hands out one URL per request and records how each was asked for."""

    def __init__(self) -> None:
        self.routes: list[tuple[bool, str | None]] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def route(self, *, alone=False, url=None):
        with self._lock:
            self.routes.append((alone, url))
            index = len(self.routes)
        yield url or f"http://127.0.0.1:{index}/"


def routed_scheduler(settings, router, transport):
    fake = FakeMonotonic()
    clock = CompressedClock(60.0, monotonic=fake.monotonic, sleep=fake.sleep)
    return LocalScheduler(settings, settings.jobs[0], router, clock=clock, transport=transport)


@pytest.mark.parametrize("fault", [Fault.SLOW, Fault.CRASH])
def test_an_attempt_that_ends_its_instance_goes_alone_and_its_copy_with_it(settings, fault):
    router = RecordingRouter()
    transport = RecordingTransport(HttpReply(200, "executed"))
    scheduler = routed_scheduler(settings, router, transport)
    scheduler.run(0, utc("2026-10-16T12:05:00Z"), RunFaults(primary=fault, duplicate=True))
    scheduler.join_copies()

    assert sorted(router.routes, key=str) == sorted([(True, None), (False, "http://127.0.0.1:1/")], key=str)
    urls = [url for url, _, _, _ in transport.requests]
    assert urls == ["http://127.0.0.1:1/"] * 2  # the attempt and its copy, on one instance


def test_other_attempts_share_instances(settings):
    router = RecordingRouter()
    transport = RecordingTransport(HttpReply(200, "executed"))
    scheduler = routed_scheduler(settings, router, transport)
    scheduler.run(0, utc("2026-10-16T12:05:00Z"), RunFaults(primary=Fault.FAIL, duplicate=True))
    scheduler.join_copies()
    assert router.routes == [(False, None), (False, None)]


def test_a_slow_attempt_cut_off_is_reported_ended(settings):
    transport = RecordingTransport(DeliveryDropped("reset"), HttpReply(200, "lease_taken_over"))
    scheduler = scheduler_for(settings, settings.jobs[0], transport, FakeMonotonic())
    result = scheduler.run(0, utc("2026-10-16T12:05:00Z"), RunFaults(primary=Fault.SLOW))
    assert [d.outcome for d in result.deliveries] == [ENDED, "lease_taken_over"]
    assert result.deliveries[0].faults == [Fault.SLOW.value]


@pytest.mark.parametrize(
    "retry",
    [
        RetryConfig(retry_count=5, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3),
        RetryConfig(retry_count=5, min_backoff_seconds=5, max_backoff_seconds=20, max_doublings=1),
        RetryConfig(retry_count=5, min_backoff_seconds=10, max_retry_duration_seconds=75),
    ],
)
@pytest.mark.parametrize("speedup", [1.0, 60.0])
def test_retry_waits_are_the_timing_modules_schedule_scaled_by_the_speedup(settings, retry, speedup):
    job = dataclasses.replace(settings.jobs[0], retry=retry)
    fake = FakeMonotonic()
    # Every attempt fails instantly, the case timing.retry_arrivals_... describes.
    transport = RecordingTransport(HttpReply(500, "failed_released"))
    result = scheduler_for(settings, job, transport, fake, speedup).run(0, utc("2026-10-16T12:05:00Z"))

    arrivals = timing.retry_arrivals_if_every_attempt_fails_instantly(retry)
    expected = [
        (later - earlier) / speedup for earlier, later in zip([0.0, *arrivals], arrivals, strict=False)
    ]
    assert fake.sleeps == pytest.approx(expected)
    assert len(result.deliveries) == 1 + len(arrivals)
    assert result.retries_exhausted


def test_a_timeout_counts_as_a_failed_attempt(settings):
    job = settings.jobs[0]
    fake = FakeMonotonic()
    transport = RecordingTransport(DeliveryTimeout("slow"), HttpReply(200, "duplicate_completed"))
    result = scheduler_for(settings, job, transport, fake).run(0, utc("2026-10-16T12:05:00Z"))
    assert [d.outcome for d in result.deliveries] == ["timeout", "duplicate_completed"]
    assert fake.sleeps == [job.retry.backoff_before_retry(1) / 60]


def test_fault_plans_are_reproducible_and_cover_every_kind():
    rates = FaultRates(duplicate=0.05, lost_ack=0.05, slow=0.05, crash=0.05, fail=0.05)
    plan = plan_faults(20, rates, seed=3)
    assert plan == plan_faults(20, rates, seed=3)
    assert all(count >= 1 for count in fault_counts(plan).values())
    assert all(sum(kind in PRIMARY_FAULTS for kind in run.kinds) <= 1 for run in plan)


def test_a_zero_rate_is_never_injected():
    plan = plan_faults(50, FaultRates(crash=0.0), seed=1)
    assert fault_counts(plan)[Fault.CRASH.value] == 0


def test_primary_rates_above_one_are_rejected():
    with pytest.raises(ValueError, match="must not exceed 1"):
        plan_faults(5, FaultRates(lost_ack=0.5, slow=0.5, crash=0.5, fail=0.0), seed=1)
