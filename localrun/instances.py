"""The local run's view of the ledger and of its function instances.

Which runs an attempt may still be executing is read from Firestore (the run ledger's live
claims), never from the responses the scheduler saw; the instance pool spreads deliveries over
several Functions Framework servers and kills one mid-run for the crash fault.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from exactly_once.delivery.scheduler_request import format_rfc3339
from infra.plan.headers import delivery_headers
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from localrun.compression import WARM_UP_JOB
from localrun.function_server import START_TIMEOUT_SECONDS
from policy.scheduler_guardrails.rules.timing.rules import RetryConfig

# How late after its time limit the function may still be ending an attempt (the watchdog's
# thread must run, and the process exit) on a busy machine.
ENDING_GRACE_SECONDS = 2.0

# --- the truth, read from Firestore ----------------------------------------------------------


def _schedule_key(value: Any) -> str:
    return format_rfc3339(value) if isinstance(value, datetime) else str(value)


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


class WarmUpError(RuntimeError):
    """An instance never answered a warm-up delivery with a 2xx before the deadline."""


class InstancePool:
    """Function instances behind one "service", like Cloud Run's: deliveries go round-robin to
    the instances that are up, and a crash (SIGKILL) takes down one instance with every
    request in flight on it, while the others keep serving. The crashed instance restarts in
    the background, so the scheduler's retry clock starts at the crash, as in the cloud.

    Each instance serves many requests at once (the demo's servers run 64 threads), whereas
    the stack's instances serve one. So an attempt that ends its instance (a crash, or a job
    the function's watchdog ends at its time limit) is routed `alone`: to an instance drained
    of other requests and kept out of rotation until nothing of that attempt can still be
    running there, as in the cloud, where ending it cuts no other run short. One instance always stays in
    rotation. A single instance has nowhere else to send the others: an attempt that ends it
    ends every request in flight with it, and the service refuses connections until it is back.
    """

    def __init__(
        self,
        servers: Sequence[Any],
        db: firestore.Client,
        runs_collection: str,
        *,
        time_limit_seconds: float,
        alone_timeout_seconds: float = 120.0,
    ) -> None:
        if not servers:
            raise ValueError("at least one instance")
        self._servers = list(servers)  # localrun.function_server.FunctionServer objects
        self._db = db
        self._runs = runs_collection
        # An attempt runs at most this long on an instance: the function ends it then.
        self._time_limit = time_limit_seconds
        # How long an attempt sent alone may wait for an instance to come free.
        self._alone_timeout = alone_timeout_seconds
        self._changed = threading.Condition()  # guards everything below
        self._down: set[int] = set()
        self._alone: set[int] = set()
        self._in_flight = [0] * len(self._servers)
        self._next = 0
        self._background: list[threading.Thread] = []
        self._crash_lock = threading.Lock()  # one crash decision at a time
        self.crashes = 0
        self.freezes = 0
        self.errors: list[str] = []

    def start(self) -> None:
        for server in self._servers:
            server.start()

    def warm_up(self, settings: StackSettings, job: JobSettings, *, deadline_seconds: float = 120.0) -> None:
        """One run per instance, of a job name no report counts, before the clock starts: the
        first request of an instance (and of a fresh emulator) is slow enough to overrun a
        compressed attempt deadline, which would only show start-up cost, not a fault.

        Delivered the way Cloud Scheduler does: a 5xx, a 409 or no answer is retried with
        Scheduler's backoff until a 2xx, and only a deadline ends the retries (WarmUpError)."""
        warm = dataclasses.replace(job, name=WARM_UP_JOB, body=None)
        backoff = RetryConfig(min_backoff_seconds=0.25, max_backoff_seconds=4.0, max_doublings=4)
        for server in self._servers:
            headers = delivery_headers(settings, warm, datetime.now(UTC).replace(microsecond=0))
            deadline = time.monotonic() + deadline_seconds
            retries = 0
            while (answer := _warm_up_delivery(server.url, headers, deadline)) is not None:
                retries += 1
                pause = backoff.backoff_before_retry(retries)
                if time.monotonic() + pause > deadline:
                    raise WarmUpError(
                        f"instance {server.url} answered no warm-up delivery with a 2xx within "
                        f"{deadline_seconds:g}s ({retries} tries; last: {answer})"
                    )
                time.sleep(pause)

    def stop(self, *, wait: bool = True) -> None:
        """Stop every instance, once the restarts under way are done (`wait`), or at once: an
        interrupted run must not wait for them."""
        if wait:
            self.wait_until_serving()
        for server in self._servers:
            server.stop()

    @contextlib.contextmanager
    def route(self, *, alone: bool = False, url: str | None = None) -> Iterator[str]:
        """The URL of the instance a request goes to, counted in flight until the block ends
        (delivery.Router)."""
        alone = alone and len(self._servers) > 1
        with self._changed:
            if url is not None:
                index = next(i for i, server in enumerate(self._servers) if server.url == url)
            elif alone:
                index = self._take_alone(self._alone_timeout)
            else:
                index = self._next_in_rotation()
            self._in_flight[index] += 1
            workers = self._servers[index].worker_pids() if alone else frozenset()
        sent_at = time.monotonic()
        try:
            yield str(self._servers[index].url)
        finally:
            with self._changed:
                self._in_flight[index] -= 1
                self._changed.notify_all()
            if alone:
                self._in_background(self._give_back, index, workers, sent_at, name=f"give-back-{index}")

    def _next_in_rotation(self) -> int:
        """The next instance that is up and not serving an attempt alone (any instance, when
        none is)."""
        count = len(self._servers)
        for step in range(count):
            index = (self._next + step) % count
            if index not in self._down and index not in self._alone:
                self._next = index + 1
                return index
        self._next += 1
        return self._next % count

    def _take_alone(self, timeout: float) -> int:
        """Take the least busy instance out of rotation (leaving one in it), then wait until
        the requests it was serving have ended."""
        deadline = time.monotonic() + timeout

        def free() -> list[int]:
            return [i for i in range(len(self._servers)) if i not in self._down and i not in self._alone]

        while len(free()) < 2:
            if not self._changed.wait(deadline - time.monotonic()):
                raise RuntimeError(f"no instance came free for an attempt sent alone within {timeout:g}s")
        index = min(free(), key=lambda i: self._in_flight[i])
        self._alone.add(index)
        while self._in_flight[index]:
            if not self._changed.wait(deadline - time.monotonic()):
                raise RuntimeError(f"instance {index} was not drained within {timeout:g}s")
        return index

    def _give_back(self, index: int, workers: frozenset[int], sent_at: float) -> None:
        """Back into rotation once nothing of the attempt sent alone can still be running on the
        instance: its worker was replaced (ended by the watchdog or a crash) or its time limit has
        passed (it answered), and the instance serves again."""
        server = self._servers[index]
        may_run_until = sent_at + self._time_limit + ENDING_GRACE_SECONDS
        wait_for(lambda: server.worker_pids() != workers or time.monotonic() > may_run_until, timeout=3600)
        wait_for(lambda: index not in self._down and server.answers(), timeout=START_TIMEOUT_SECONDS)
        with self._changed:
            self._alone.discard(index)
            self._changed.notify_all()

    def crash_when_inside(
        self, job_id: str, schedule_time: datetime, url: str, done: threading.Event
    ) -> bool:
        """Once the run is claimed (the attempt sent to `url`, or its copy beside it, sleeps in
        the job), kill that instance. False when the attempt and its copy ended first."""
        key = format_rfc3339(schedule_time)
        return self.kill_when(url, lambda: key in live_claims(self._db, self._runs, job_id), done)

    def kill_when(
        self, url: str, ready: Callable[[], bool], done: threading.Event, timeout: float = 30.0
    ) -> bool:
        """Kill the instance at `url` (SIGKILL) once `ready()` says so, and restart it in the
        background. False when the attempt sent there (and its copy) ended first."""
        index = self._index_of(url)
        wait_for(lambda: self._ended(index, done) or ready(), timeout=timeout)
        with self._crash_lock:
            with self._changed:
                if self._ended(index, done) or index in self._down:
                    return False
                self._down.add(index)
            self._servers[index].crash()
            self.crashes += 1
            self._in_background(self._restart, index, name=f"restart-{index}")
        return True

    def freeze_when(
        self,
        url: str,
        ready: Callable[[], bool],
        done: threading.Event,
        thaw_when: Callable[[], bool],
        *,
        timeout: float = 30.0,
        longest_freeze: float = 120.0,
        frozen: threading.Event | None = None,
    ) -> bool:
        """Freeze the instance at `url` (SIGSTOP) once `ready()` says so, out of rotation,
        and thaw it (SIGCONT) once `thaw_when()` says so; `frozen` is set in between. False
        when the attempt sent there (and its copy) ended before it was ready."""
        index = self._index_of(url)
        wait_for(lambda: self._ended(index, done) or ready(), timeout=timeout)
        with self._changed:
            if self._ended(index, done) or index in self._down:
                return False
            self._down.add(index)
        server = self._servers[index]
        server.freeze()
        self.freezes += 1
        if frozen is not None:
            frozen.set()
        try:
            wait_for(thaw_when, timeout=longest_freeze, interval=0.05)
        finally:
            server.thaw()
            with self._changed:
                self._down.discard(index)
                self._changed.notify_all()
        return True

    def _index_of(self, url: str) -> int:
        return next(i for i, server in enumerate(self._servers) if server.url == url)

    def _ended(self, index: int, done: threading.Event) -> bool:
        """The attempt sent to instance `index` returned; on an instance of its own, whatever
        is still in flight there is its copy."""
        return done.is_set() and (index not in self._alone or not self._in_flight[index])

    def wait_until_serving(self) -> None:
        """Every crashed instance restarted, every instance sent alone back in rotation."""
        while True:
            with self._changed:
                pending = [thread for thread in self._background if thread.is_alive()]
            if not pending:
                return
            for thread in pending:
                thread.join()

    def _in_background(self, target: Callable[..., None], *args: Any, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._changed:
            self._background.append(thread)
        thread.start()

    def _restart(self, index: int) -> None:
        try:
            self._servers[index].start()
        except Exception as error:  # reported; deliveries to it then fail visibly
            self.errors.append(str(error))
            return
        with self._changed:
            self._down.discard(index)
            self._changed.notify_all()


def _warm_up_delivery(url: str, headers: Mapping[str, str], deadline: float) -> str | None:
    """None when the run was answered with a 2xx; else what came back instead."""
    try:
        reply = requests.post(
            url, headers=dict(headers), data=b"", timeout=max(1.0, deadline - time.monotonic())
        )
    except requests.RequestException as error:
        return f"no answer ({type(error).__name__})"
    if 200 <= reply.status_code < 300:
        return None
    return f"{reply.status_code} {reply.text[:200]}"
