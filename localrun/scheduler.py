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

import contextlib
import dataclasses
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import requests
from croniter import croniter
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from infra.settings import JobSettings, StackSettings
from localrun.faults import NO_FAULTS, Fault, RunFaults

EXECUTIONS_COLLECTION = "job_executions"  # where function/jobs/demo.py records executions
JOB_NAME_HEADER = "X-CloudScheduler-JobName"
SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
WARM_UP_JOB = "localrun-warm-up"  # never reported: counts filter on the real job's name


# --- fire times -------------------------------------------------------------------------------


def fire_times(schedule: str, time_zone: str, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times (UTC) of a unix-cron `schedule` read in `time_zone`.

    Cron fields are wall-clock times, so croniter walks naive local times and zoneinfo turns
    each into an instant; croniter never sees an offset and cannot get a DST change wrong.
    A wall time skipped by spring-forward does not fire; one repeated by fall-back fires
    once, at its first occurrence.
    """
    if after.tzinfo is None:
        raise ValueError("`after` must be timezone-aware")
    zone = ZoneInfo(time_zone)
    cursor = after.astimezone(zone).replace(tzinfo=None)
    iterator = croniter(schedule, cursor)
    times: list[datetime] = []
    while len(times) < count:
        wall: datetime = iterator.get_next(datetime)
        local = wall.replace(tzinfo=zone, fold=0)
        instant = local.astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) != wall:
            continue  # inside a spring-forward gap: this wall time never happens
        if instant <= after or (times and instant <= times[-1]):
            continue
        times.append(instant)
    return times


def rfc3339(instant: datetime) -> str:
    """ScheduleTime as Cloud Scheduler writes it: UTC, 'Z', whole seconds for cron times."""
    text = instant.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return text.replace(".000000Z", "Z")


def delivery_headers(settings: StackSettings, job: JobSettings, schedule_time: datetime) -> dict[str, str]:
    """Headers of every delivery of one run. ScheduleTime is the run's identity, so it is the
    same on every retry; the project/location headers are the stack's own HttpTarget headers."""
    return {
        JOB_NAME_HEADER: job.name,
        SCHEDULE_TIME_HEADER: rfc3339(schedule_time),
        **settings.headers_for(job),
    }


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


# --- sending ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpReply:
    status: int
    outcome: str | None  # the handler's `outcome`, when the body says


class DeliveryTimeout(Exception):
    """No response within the attempt deadline; the target may still be working."""


class DeliveryDropped(Exception):
    """The connection failed or was cut: refused while restarting, or killed mid-request."""


class Transport(Protocol):
    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> HttpReply: ...


class RequestsTransport:
    """HTTP over loopback. `timeout` bounds the wait for the response like Scheduler's
    attempt deadline: the client stops listening, the server keeps running the job."""

    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> HttpReply:
        try:
            response = requests.post(url, headers=dict(headers), data=body, timeout=timeout)
        except requests.Timeout as error:
            raise DeliveryTimeout(str(error)) from None
        except requests.ConnectionError as error:
            raise DeliveryDropped(str(error)) from None
        outcome: str | None = None
        with contextlib.suppress(ValueError):
            payload = response.json()
            if isinstance(payload, dict) and isinstance(payload.get("outcome"), str):
                outcome = payload["outcome"]
        return HttpReply(response.status_code, outcome)


# Called with the run, the URL its attempt went to and an event set when that request has
# returned; crashes that instance while the attempt is inside the job, and says whether it did.
CrashHook = Callable[[JobSettings, datetime, str, threading.Event], bool]


# --- what happened ----------------------------------------------------------------------------


@dataclass
class Delivery:
    """One HTTP request of a run, as the report shows it."""

    attempt: int  # 1 = first attempt, 2 = first retry, ...
    copy: bool  # an injected duplicate, invisible to the scheduler's retry logic
    sent_at_s: float  # simulated seconds since the run's first attempt
    status: int | None  # None: no response (timeout, dropped connection)
    outcome: str  # the handler's outcome, or timeout / dropped / lost_ack:<outcome>
    faults: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    index: int
    job: str
    schedule_time: str
    faults: list[str]
    deliveries: list[Delivery] = field(default_factory=list)
    acknowledged: bool = False  # a 2xx reached the scheduler
    executions: int = 0  # counted in Firestore, filled in after the run settles

    @property
    def retries_exhausted(self) -> bool:
        return not self.acknowledged

    @property
    def verdict(self) -> str:
        if self.executions == 1:
            return "exactly-once"
        return "lost" if self.executions == 0 else "duplicate"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(retries_exhausted=self.retries_exhausted, verdict=self.verdict)
        return data


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
        headers = delivery_headers(self.settings, self.job, schedule_time)
        if body:
            headers["Content-Type"] = "application/json"
        return headers

    def run(self, index: int, schedule_time: datetime, faults: RunFaults = NO_FAULTS) -> RunResult:
        """All attempts of one run: retry on non-2xx, timeout or dropped connection, per the
        job's RetryConfig, until a 2xx or the policy says stop."""
        result = RunResult(index, self.job.name, rfc3339(schedule_time), [f.value for f in faults.kinds])
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
                crashed.append(crash(self.job, schedule_time, url, done))

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


# --- the truth, read from Firestore ----------------------------------------------------------


def _schedule_key(value: Any) -> str:
    return rfc3339(value) if isinstance(value, datetime) else str(value)


def count_executions(db: firestore.Client, job_name: str) -> Counter[str]:
    """Executions per ScheduleTime, from the demo job's own records: what actually ran, not
    what the responses claimed."""
    query = db.collection(EXECUTIONS_COLLECTION).where(filter=FieldFilter("job_name", "==", job_name))
    return Counter(_schedule_key(doc.get("schedule_time")) for doc in query.stream())


def live_claims(db: firestore.Client, runs_collection: str, job_name: str) -> list[str]:
    """ScheduleTimes of runs an attempt may still be executing (in progress, lease not over),
    judged like the ledger does: the lease runs from the claim's commit time, on Firestore's
    clock (the read's read_time), never on this machine's."""
    query = db.collection(runs_collection).where(filter=FieldFilter("job_name", "==", job_name))
    return [
        _schedule_key(fields.get("schedule_time"))
        for doc in query.stream()
        if (fields := doc.to_dict() or {}).get("status") == "in_progress"
        and isinstance(fields.get("lease_seconds"), int | float)
        and doc.update_time + timedelta(seconds=fields["lease_seconds"]) > doc.read_time
    ]


def wait_for(probe: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


class InstancePool:
    """Function instances behind one "service", like Cloud Run's: deliveries go round-robin to
    the instances that are up, and a crash (SIGKILL) takes down one instance with every
    request in flight on it, while the others keep serving. The crashed instance restarts in
    the background, so the scheduler's retry clock starts at the crash, as in the cloud.
    With a single instance a crash makes the whole service refuse connections until it is back.
    """

    def __init__(self, servers: Sequence[Any], db: firestore.Client, runs_collection: str) -> None:
        if not servers:
            raise ValueError("at least one instance")
        self._servers = list(servers)  # localrun.function_server.FunctionServer objects
        self._db = db
        self._runs = runs_collection
        self._lock = threading.Lock()
        self._down: set[int] = set()
        self._next = 0
        self._restarts: list[threading.Thread] = []
        self._crash_lock = threading.Lock()  # one crash decision at a time
        self.crashes = 0
        self.errors: list[str] = []

    def start(self) -> None:
        for server in self._servers:
            server.start()

    def warm_up(self, settings: StackSettings, job: JobSettings) -> None:
        """One delivery per instance, of a job name no report counts, before the clock starts:
        the first request of an instance (and of a fresh emulator) is slow enough to overrun a
        compressed attempt deadline, which would only show start-up cost, not a fault."""
        warm = dataclasses.replace(job, name=WARM_UP_JOB, body=None)
        for server in self._servers:
            headers = delivery_headers(settings, warm, datetime.now(UTC).replace(microsecond=0))
            requests.post(server.url, headers=headers, data=b"", timeout=60).raise_for_status()

    def stop(self) -> None:
        self.wait_until_serving()
        for server in self._servers:
            server.stop()

    def pick(self) -> str:
        """URL of the next instance that is up (any instance, when none is)."""
        with self._lock:
            count = len(self._servers)
            for step in range(count):
                index = (self._next + step) % count
                if index not in self._down:
                    self._next = index + 1
                    return str(self._servers[index].url)
            self._next += 1
            return str(self._servers[self._next % count].url)

    def crash_when_inside(
        self, job: JobSettings, schedule_time: datetime, url: str, done: threading.Event
    ) -> bool:
        """Once the attempt sent to `url` has claimed the run (it is sleeping inside the job),
        kill that instance. False when the attempt ended first (e.g. another crash got it)."""
        key = rfc3339(schedule_time)

        def claimed_or_done() -> bool:
            return done.is_set() or key in live_claims(self._db, self._runs, job.name)

        wait_for(claimed_or_done, timeout=30.0)
        with self._crash_lock:
            index = next(i for i, server in enumerate(self._servers) if server.url == url)
            with self._lock:
                if done.is_set() or index in self._down:
                    return False
                self._down.add(index)
            self._servers[index].crash()
            self.crashes += 1
            restart = threading.Thread(target=self._restart, args=(index,), name=f"restart-{index}")
            self._restarts.append(restart)
            restart.start()
        return True

    def wait_until_serving(self) -> None:
        for restart in list(self._restarts):
            restart.join()

    def _restart(self, index: int) -> None:
        try:
            self._servers[index].start()
        except Exception as error:  # reported; deliveries to it then fail visibly
            self.errors.append(str(error))
            return
        with self._lock:
            self._down.discard(index)
