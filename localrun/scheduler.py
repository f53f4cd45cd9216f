"""A local Cloud Scheduler: the dev stack's jobs, delivered at least once, on a compressed clock.

It exists so a forker can watch exactly-once hold before deploying anything, and so CI can
throw the faults Cloud Scheduler really produces (duplicates, lost acks, slow targets, crashed
instances, transient failures) at the real function and the real Firestore emulator.

Everything is configured in *simulated* seconds straight from the stack settings (attempt
deadline, retry policy, lease, retention) and only converted to wall-clock seconds at the last
moment, by one factor (`CompressedClock.speedup`). Scaling every duration by the same factor
keeps `timing.check_job_timing`'s verdict: a config that would lose a run in the cloud loses
it here too. The retry schedule comes from `infra.timing.RetryConfig`, never re-implemented.

Scheduled runs are fired in schedule order, `interval_seconds` of wall-clock time apart,
rather than at their compressed fire times: a 5-minute schedule would otherwise leave the demo
idle. Each run still carries its true fire time in X-CloudScheduler-ScheduleTime.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from audit import following_fire_times
from scheduler_request import format_rfc3339

from infra.settings import JobSettings, StackSettings
from localrun.delivery import (
    CrashHook,
    Delivery,
    DeliveryDropped,
    DeliveryTimeout,
    RequestsTransport,
    RunResult,
    Transport,
)
from localrun.faults import NO_FAULTS, Fault, RunFaults

WARM_UP_JOB = "localrun-warm-up"  # never reported: counts filter on the real job's name


# --- fire times -------------------------------------------------------------------------------


def fire_times(schedule: str, time_zone: str, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times (UTC) of a unix-cron `schedule` read in `time_zone`, by the
    audit's DST-correct walk (function/audit.py), so the demo fires what the audit expects."""
    if after.tzinfo is None:
        raise ValueError("`after` must be timezone-aware")
    return list(itertools.islice(following_fire_times(schedule, ZoneInfo(time_zone), after), count))


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


def compressed_function_env(
    settings: StackSettings, speedup: float, *, firestore_project: str, emulator_host: str
) -> dict[str, str]:
    """The function's environment for a local run: the stack's own, with the lease and the
    retention compressed by the scheduler's speed-up (else a crashed attempt's lease would
    outlive the whole compressed retry schedule), and Firestore pointed at the emulator.

    `firestore_project` only isolates this run's documents in the emulator; the run ids still
    use the stack's project, which the deliveries carry in X-Job-Project.
    """
    env = settings.function_environment()
    env.update(
        GOOGLE_CLOUD_PROJECT=firestore_project,
        FIRESTORE_DATABASE="(default)",
        FIRESTORE_EMULATOR_HOST=emulator_host,
        LEASE_SECONDS=repr(settings.lease_seconds / speedup),
        RETENTION_SECONDS=repr(settings.retention_seconds / speedup),
        THREADS="64",  # every concurrent run and duplicate gets a thread
    )
    return env


# --- the scheduler ----------------------------------------------------------------------------


class LocalScheduler:
    """Delivers scheduled runs of one job the way Cloud Scheduler does, with faults."""

    def __init__(
        self,
        settings: StackSettings,
        job: JobSettings,
        url: str | Callable[[], str],
        *,
        clock: CompressedClock,
        transport: Transport | None = None,
        crash: CrashHook | None = None,
        on_run_done: Callable[[RunResult], None] | None = None,
    ) -> None:
        self.settings = settings
        self.job = job
        # The name the function sees and records (X-CloudScheduler-JobName).
        self.job_id = settings.scheduler_job_id(job)
        # A fixed URL, or a chooser called per request (an InstancePool's `pick`).
        self._pick = url if callable(url) else lambda: url
        self.clock = clock
        self._transport = transport or RequestsTransport()
        self._crash = crash
        self._on_run_done = on_run_done
        self._copies: list[threading.Thread] = []
        self._copies_lock = threading.Lock()

    # Bodies: the job's own body, with durations in simulated seconds compressed like the rest.

    def body_for(self, faults: Sequence[Fault]) -> bytes:
        body: dict[str, Any] = dict(self.job.body or {})
        if isinstance(body.get("sleep_seconds"), int | float):
            body["sleep_seconds"] = self.clock.real(float(body["sleep_seconds"]))
        deadline = self.job.attempt_deadline_seconds
        if Fault.SLOW in faults:
            # Past the deadline, yet inside the lease: in the cloud the function timeout
            # (<= lease) would stop it; locally nothing does, so it must end on its own.
            lease = float(self.settings.lease_seconds)
            slow = (deadline + lease) / 2 if lease > deadline else deadline * 1.25
            body["sleep_seconds"] = self.clock.real(slow)
        if Fault.CRASH in faults:
            # Long enough to be killed inside the job, short of the deadline.
            body["sleep_seconds"] = self.clock.real(deadline * 0.75)
        if Fault.FAIL in faults:
            body["fail"] = True
        if not body and self.job.body is None:
            return b""
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def headers_for(self, schedule_time: datetime, body: bytes) -> dict[str, str]:
        headers = self.settings.delivery_headers(self.job, schedule_time)
        if body:
            headers["Content-Type"] = "application/json"
        return headers

    def run(self, index: int, schedule_time: datetime, faults: RunFaults = NO_FAULTS) -> RunResult:
        """All attempts of one run: retry on non-2xx, timeout or dropped connection, per the
        job's RetryConfig, until a 2xx or the policy says stop."""
        result = RunResult(
            index, self.job.name, format_rfc3339(schedule_time), [f.value for f in faults.kinds]
        )
        first_attempt = self.clock.now()
        retries_done = 0
        while True:
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
        timeout = self.clock.real(self.job.attempt_deadline_seconds)
        sent_at = round(self.clock.now() - first_attempt, 3)
        url = self._pick()

        if Fault.DUPLICATE in faults:
            copy = threading.Thread(
                target=self._send_copy,
                args=(result, attempt, sent_at, headers, body, timeout),
                name=f"copy-{result.index}",
            )
            with self._copies_lock:
                self._copies.append(copy)
            copy.start()

        done = threading.Event()
        crasher: threading.Thread | None = None
        crashed: list[bool] = []
        if Fault.CRASH in faults and self._crash is not None:
            crash = self._crash

            def crash_when_inside() -> None:
                crashed.append(crash(self.job_id, schedule_time, url, done))

            crasher = threading.Thread(target=crash_when_inside, name=f"crash-{result.index}")
            crasher.start()

        delivery = Delivery(attempt, False, sent_at, None, "", [f.value for f in faults])
        try:
            reply = self._transport.post(url, headers, body, timeout)
            delivery.status, delivery.outcome = reply.status, reply.outcome or "?"
            ok = 200 <= reply.status < 300
        except DeliveryTimeout:
            delivery.outcome, ok = "timeout", False
        except DeliveryDropped:
            delivery.outcome, ok = "dropped", False
        finally:
            done.set()
        if crasher is not None:
            crasher.join()
            if not any(crashed):
                delivery.faults.remove(Fault.CRASH.value)  # the attempt ended before it could
        if delivery.outcome == "dropped":
            # Killed by a crash (of another run) before the fault could show.
            for fault in (Fault.SLOW, Fault.FAIL):
                if fault.value in delivery.faults:
                    delivery.faults.remove(fault.value)
        if Fault.LOST_ACK in faults:
            if delivery.status is None:
                delivery.faults.remove(Fault.LOST_ACK.value)  # no answer to lose
            else:
                # The function answered; pretend the answer never arrived.
                delivery.outcome = f"lost_ack:{delivery.outcome}"
                ok = False
        result.deliveries.append(delivery)
        return ok

    def _send_copy(
        self,
        result: RunResult,
        attempt: int,
        sent_at: float,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> None:
        delivery = Delivery(attempt, True, sent_at, None, "", [Fault.DUPLICATE.value])
        try:
            reply = self._transport.post(self._pick(), headers, body, timeout)
            delivery.status, delivery.outcome = reply.status, reply.outcome or "?"
        except DeliveryTimeout:
            delivery.outcome = "timeout"
        except DeliveryDropped:
            delivery.outcome = "dropped"
        result.deliveries.append(delivery)
