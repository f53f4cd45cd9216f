"""A local Cloud Scheduler: a stack's jobs, delivered at least once, on a compressed clock.

It exists so a forker can watch exactly-once hold before deploying anything, and so CI can
throw the faults Cloud Scheduler really produces (duplicates, lost acks, slow targets, crashed
instances, transient failures) at the real function and the real Firestore emulator.

Everything is configured in *simulated* seconds straight from the stack settings (attempt
deadline, retry policy, lease, retention) and only converted to wall-clock seconds at the last
moment, by one factor (`CompressedClock.speedup`). Scaling every duration by the same factor
keeps `timing.check_job_timing`'s verdict: a config that would lose a run in the cloud loses
it here too. The exceptions are the durations Firestore's speed puts a floor under (the lease,
the time limit, and the attempt deadline with it: localrun/compression.py), and those are
judged by the same rules. The retry schedule comes from
`policy.scheduler_guardrails.rules.timing.rules.RetryConfig`, never
re-implemented.

Scheduled runs are fired in schedule order, `interval_seconds` of wall-clock time apart,
rather than at their compressed fire times: a 5-minute schedule would otherwise leave the demo
idle. Each run still carries its true fire time in X-CloudScheduler-ScheduleTime.
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from exactly_once.audit.schedule import following_fire_times
from exactly_once.delivery.scheduler_request import format_rfc3339
from infra.plan.headers import delivery_headers
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from jobs.demo import MAX_SLEEP_SECONDS
from localrun.compression import BUSY_ROUND_TRIP_SECONDS, CompressedTiming
from localrun.delivery import (
    CrashHook,
    Delivery,
    DeliveryDropped,
    DeliveryTimeout,
    FixedRoute,
    RequestsTransport,
    Router,
    RunResult,
    Transport,
)
from localrun.faults import NO_FAULTS, Fault, RunFaults

# The outcome of an attempt whose instance the function's watchdog ended under it.
ENDED = "ended"


# --- fire times -------------------------------------------------------------------------------


def fire_times(schedule: str, time_zone: str, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times (UTC) of a unix-cron `schedule` read in `time_zone`, by the
    audit's DST-correct walk (exactly_once.audit.missed_runs), so the demo fires what the audit
    expects."""
    if after.tzinfo is None:
        raise ValueError("`after` must be timezone-aware")
    return list(itertools.islice(following_fire_times(schedule, ZoneInfo(time_zone), after), count))


def latest_fire_times(schedule: str, time_zone: str, before: datetime, count: int) -> list[datetime]:
    """The last `count` fire times (UTC) at or before `before`, oldest first: what the local
    run delivers. Times in the past, as Cloud Scheduler's deliveries carry them: a time ahead
    of Firestore's clock is a forced run's (exactly_once.delivery.forced_runs)."""
    if count <= 0:
        return []
    span = timedelta(hours=1)
    while True:
        found: collections.deque[datetime] = collections.deque(maxlen=count)
        for instant in following_fire_times(schedule, ZoneInfo(time_zone), before - span):
            if instant > before:
                break
            found.append(instant)
        if len(found) == count or span > timedelta(days=366 * 30):
            return list(found)
        span *= 2


# --- the compressed clock ---------------------------------------------------------------------


class CompressedClock:
    """Simulated seconds run `speedup` times faster than wall-clock seconds."""

    def __init__(
        self,
        speedup: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speedup <= 0:
            raise ValueError(f"speed-up must be positive, got {speedup}")
        self.speedup = speedup
        self._monotonic = monotonic
        self._sleep = sleep

    def real(self, sim_seconds: float) -> float:
        return sim_seconds / self.speedup

    def now(self) -> float:
        """Simulated seconds on an arbitrary origin; only differences mean anything."""
        return self._monotonic() * self.speedup

    def wait(self, sim_seconds: float) -> None:
        self._sleep(self.real(sim_seconds))


# --- the scheduler ----------------------------------------------------------------------------


class LocalScheduler:
    """Delivers scheduled runs of one job the way Cloud Scheduler does, with faults."""

    def __init__(
        self,
        settings: StackSettings,
        job: JobSettings,
        instances: str | Router,
        *,
        clock: CompressedClock,
        compressed: CompressedTiming | None = None,
        transport: Transport | None = None,
        crash: CrashHook | None = None,
        on_run_done: Callable[[RunResult], None] | None = None,
        region: str = "",
        up: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.job = job
        # The name the function sees and records (X-CloudScheduler-JobName).
        self.job_id = settings.scheduler_job_id(job)
        # A fixed URL, or the instances of a service (an InstancePool).
        self._instances = FixedRoute(instances) if isinstance(instances, str) else instances
        self.clock = clock
        # The function's durations on this clock (floors included), which the attempt deadline
        # and the faults' sleeps follow.
        self.compressed = compressed or CompressedTiming.of(
            settings, clock.speedup, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS, job=job
        )
        self._transport = transport or RequestsTransport()
        self._crash = crash
        self._on_run_done = on_run_done
        # A regional scheduler (localrun/regions.py): the region each delivery is marked with,
        # and whether the region is up. A region that is down sends nothing: neither a run's
        # first attempt nor a retry, like Cloud Scheduler in a region that is out.
        self.region = region
        self._up = up
        self._copies: list[threading.Thread] = []
        self._copies_lock = threading.Lock()

    # Bodies: the job's own body, with durations in simulated seconds compressed like the rest.

    def body_for(self, faults: Sequence[Fault]) -> bytes:
        body: dict[str, Any] = dict(self.job.body or {})
        if isinstance(body.get("sleep_seconds"), int | float):
            body["sleep_seconds"] = self.clock.real(float(body["sleep_seconds"]))
        if Fault.SLOW in faults:
            # Hangs well past the function timeout, where Cloud Run answers but does not stop
            # the code: the function's watchdog ends the attempt, with its instance, at the
            # attempt's time limit, and Scheduler hears nothing.
            hang = 2 * self.compressed.function_timeout_seconds
            body["sleep_seconds"] = min(hang, MAX_SLEEP_SECONDS)
        if Fault.CRASH in faults:
            # Long enough to be killed inside the job, well short of the time limit.
            body["sleep_seconds"] = self.compressed.time_limit_seconds / 2
        if Fault.FAIL in faults:
            body["fail"] = True
        if not body and self.job.body is None:
            return b""
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def headers_for(self, schedule_time: datetime, body: bytes) -> dict[str, str]:
        headers = delivery_headers(self.settings, self.job, schedule_time)
        if body:
            headers["Content-Type"] = "application/json"
        return headers

    def run(self, index: int, schedule_time: datetime, faults: RunFaults = NO_FAULTS) -> RunResult:
        """All attempts of one run: retry on non-2xx, timeout or dropped connection, per the
        job's RetryConfig, until a 2xx or the policy says stop, or the scheduler's region is
        down (then it sends nothing more of the run, as a regional outage does)."""
        result = RunResult(
            index, self.job.name, format_rfc3339(schedule_time), [f.value for f in faults.kinds]
        )
        first_attempt = self.clock.now()
        retries_done = 0
        while self._up is None or self._up():
            attempt = retries_done + 1
            attempt_faults = list(faults.kinds) if attempt == 1 else []
            if self._attempt(result, schedule_time, attempt, attempt_faults, first_attempt):
                result.acknowledged = True
                break
            delay = self.job.retry.next_retry_delay(retries_done, self.clock.now() - first_attempt)
            if delay is None:
                break
            self.clock.wait(delay)
            retries_done += 1
        if self._on_run_done:
            self._on_run_done(result)
        return result

    def run_all(
        self,
        schedule_times: Sequence[datetime],
        plan: Sequence[RunFaults],
        *,
        interval_seconds: float,
    ) -> list[RunResult]:
        """Fire runs in schedule order, `interval_seconds` (wall clock) apart, concurrently."""
        if len(plan) != len(schedule_times):
            raise ValueError("one RunFaults per schedule time")
        with ThreadPoolExecutor(max_workers=max(1, len(schedule_times)), thread_name_prefix="run") as pool:
            futures = []
            for index, (instant, faults) in enumerate(zip(schedule_times, plan, strict=True)):
                if index:
                    time.sleep(interval_seconds)
                futures.append(pool.submit(self.run, index, instant, faults))
            results = [future.result() for future in futures]
        self.join_copies()
        return results

    def join_copies(self, timeout: float | None = None) -> None:
        """Duplicate copies are fire-and-forget for the scheduler, not for the count."""
        with self._copies_lock:
            copies = list(self._copies)
        for thread in copies:
            thread.join(timeout)

    def _attempt(
        self,
        result: RunResult,
        schedule_time: datetime,
        attempt: int,
        faults: list[Fault],
        first_attempt: float,
    ) -> bool:
        body = self.body_for(faults)
        headers = self.headers_for(schedule_time, body)
        timeout = self.compressed.attempt_deadline_seconds(self.settings, self.job)
        # An attempt that ends its instance is sent to one serving nothing else, as in the
        # cloud: ending it must not cut other runs' requests short.
        alone = Fault.CRASH in faults or Fault.SLOW in faults
        crash: _CrashWhenInside | None = None
        with self._instances.route(alone=alone) as url:
            sent_at = round(self.clock.now() - first_attempt, 3)
            if Fault.DUPLICATE in faults:
                copy = threading.Thread(
                    target=self._send_copy,
                    args=(result, attempt, faults, sent_at, headers, body, timeout, url if alone else None),
                    name=f"copy-{result.index}",
                )
                with self._copies_lock:
                    self._copies.append(copy)
                copy.start()
            if Fault.CRASH in faults and self._crash is not None:
                crash = _CrashWhenInside(
                    self._crash, self.job_id, schedule_time, url, f"crash-{result.index}"
                )
            delivery = Delivery(attempt, False, sent_at, None, "", [f.value for f in faults])
            try:
                self._post(url, headers, body, timeout, delivery)
            finally:
                if crash is not None:
                    crash.attempt_returned.set()
        if crash is not None and not crash.happened():
            delivery.faults.remove(Fault.CRASH.value)  # the attempt and its copy ended first
        if delivery.outcome == "dropped":
            if Fault.SLOW in faults:
                # Sent alone, so nothing but its own watchdog ends its instance.
                delivery.outcome = ENDED
            elif Fault.FAIL.value in delivery.faults:
                delivery.faults.remove(Fault.FAIL.value)  # cut short before it could fail
        ok = delivery.status is not None and 200 <= delivery.status < 300
        if Fault.LOST_ACK in faults:
            if delivery.status is None:
                delivery.faults.remove(Fault.LOST_ACK.value)  # no answer to lose
            else:
                # The function answered; pretend the answer never arrived.
                delivery.outcome = f"lost_ack:{delivery.outcome}"
                ok = False
        result.deliveries.append(delivery)
        return ok

    def _post(
        self, url: str, headers: Mapping[str, str], body: bytes, timeout: float, delivery: Delivery
    ) -> None:
        """One request; its answer (or why there was none) goes into `delivery`."""
        delivery.region = self.region
        began = self.clock.now()
        try:
            reply = self._transport.post(url, headers, body, timeout)
            delivery.status, delivery.outcome = reply.status, reply.outcome or "?"
            delivery.attempt_id, delivery.fence, delivery.error = reply.attempt_id, reply.fence, reply.error
        except DeliveryTimeout:
            delivery.outcome = "timeout"
        except DeliveryDropped:
            delivery.outcome = "dropped"
        finally:
            delivery.answered_at_s = round(delivery.sent_at_s + self.clock.now() - began, 3)

    def _send_copy(
        self,
        result: RunResult,
        attempt: int,
        faults: list[Fault],
        sent_at: float,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
        url: str | None,
    ) -> None:
        delivery = Delivery(attempt, True, sent_at, None, "", [Fault.DUPLICATE.value])
        with self._instances.route(url=url) as target:
            self._post(target, headers, body, timeout, delivery)
        if delivery.outcome == "dropped" and Fault.SLOW in faults:
            delivery.outcome = ENDED  # a copy of a slow attempt runs the same hanging job, alone
        result.deliveries.append(delivery)


class _CrashWhenInside:
    """The crash fault of one attempt: a thread that asks the hook to kill the attempt's
    instance once the run is claimed, unless the attempt (and its copy) ended first."""

    def __init__(self, hook: CrashHook, job_id: str, schedule_time: datetime, url: str, name: str) -> None:
        self.attempt_returned = threading.Event()
        self._killed: list[bool] = []
        self._thread = threading.Thread(
            target=lambda: self._killed.append(hook(job_id, schedule_time, url, self.attempt_returned)),
            name=name,
        )
        self._thread.start()

    def happened(self) -> bool:
        self._thread.join()
        return any(self._killed)
