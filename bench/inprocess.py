"""Cases 1-3, in one process against one emulator: ours and the baseline side by side.

Both implementations get their own RPC-counting client on the same emulator, reached through
the modelled network (bench/network.py), and take turns (ours first on even turns, the
baseline first on odd ones), so drift in the emulator or the machine hits both alike. Every
delivery uses a run id never seen before, except the duplicates, which is the point of those
cases.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TextIO, TypeVar

from bench.baseline import BaselineHandler
from bench.cpu import CPU_METRIC, CPU_UNIT
from bench.stats import Metric, metric
from exactly_once.config import DEFAULT_RUNS_COLLECTION, DEFAULT_TIME_LIMIT_SECONDS
from exactly_once.context import RunContext
from exactly_once.delivery.handler import ScheduledRunHandler
from exactly_once.delivery.heartbeat import end_instance
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    format_rfc3339,
)
from exactly_once.ledger.protocol import RunLedger, new_attempt_id
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.router import JobRouter
from localrun.firestore_rpcs import RpcCounter, counted_emulator_client

COLLECTION = DEFAULT_RUNS_COLLECTION
# Found as the deployed function finds it: in function/, the source root, which importing
# localrun puts on the path (localrun/__init__.py).
NOOP_JOB = "jobs.noop:do_nothing"
COUNTING_JOB = "bench.inprocess:count_execution"
STORM_SIZE = 64
SCHEDULE_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

T = TypeVar("T")
# Where a long run says how far it has got.
Progress = Callable[[str], None]


class ExecutionCounter:
    """How often the job body really ran: the quantity 'exactly once' is about."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def hit(self) -> None:
        with self._lock:
            self._count += 1

    def take(self) -> int:
        with self._lock:
            count, self._count = self._count, 0
            return count


EXECUTIONS = ExecutionCounter()


def count_execution(context: RunContext) -> None:
    """Our job for the storm: a no-op that counts, resolved by JobRouter like any job."""
    del context
    EXECUTIONS.hit()


@dataclass(frozen=True)
class Delivery:
    status: int | None  # None: the handler raised, which the Functions Framework answers with 500
    seconds: float
    # This process's CPU meanwhile (every thread's: the handler's and its Firestore client's).
    cpu_seconds: float = 0.0

    @property
    def error(self) -> bool:
        return self.status is None or self.status >= 500


class RunIds:
    """Fresh scheduled runs: one job name per implementation and bench session, and a new
    schedule time for every run, so no delivery ever meets a record it did not expect."""

    def __init__(self, label: str) -> None:
        self._job = f"bench-{label}-{uuid.uuid4().hex[:8]}"
        self._next = 0

    def headers(self) -> dict[str, str]:
        self._next += 1
        schedule_time = SCHEDULE_EPOCH + timedelta(minutes=self._next)
        return {
            JOB_NAME_HEADER: self._job,
            SCHEDULE_TIME_HEADER: format_rfc3339(schedule_time),
            PROJECT_HEADER: "bench",
            LOCATION_HEADER: "local",
        }


class Implementation:
    """One contender: a way to deliver a run in process, and the RPC counter on its client."""

    def __init__(
        self,
        label: str,
        deliver: Callable[[dict[str, str]], int],
        counter: RpcCounter,
        elsewhere: Callable[[dict[str, str]], int] | None = None,
    ) -> None:
        self.label = label
        self._deliver = deliver
        # The same delivery reaching another instance (ours keeps a per-instance cache of
        # completed runs; the baseline has no instance state, so it is the same call).
        self._elsewhere = elsewhere or deliver
        self.counter = counter
        self.runs = RunIds(label)

    def deliver(self, headers: dict[str, str], *, elsewhere: bool = False) -> Delivery:
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            status: int | None = (self._elsewhere if elsewhere else self._deliver)(headers)
        except Exception:
            status = None
        return Delivery(status, time.perf_counter() - started, time.process_time() - cpu_started)

    def rpcs(self, headers: dict[str, str], *, elsewhere: bool = False) -> tuple[Delivery, int]:
        self.counter.reset()
        delivery = self.deliver(headers, elsewhere=elsewhere)
        return delivery, sum(self.counter.snapshot().values())


def ours(emulator_host: str, project: str, job: str, log_stream: TextIO) -> Implementation:
    db, counter = counted_emulator_client(emulator_host, project)
    ledger = RunLedger(
        FirestoreRunStore(db, COLLECTION), lease=timedelta(minutes=5), retention=timedelta(days=1)
    )
    # Two instances on one client: each has its own warm cache of completed runs.
    here, there = (
        ScheduledRunHandler(
            ledger,
            JobRouter(job, {}).run,
            new_attempt_id=new_attempt_id,
            time_limit_seconds=DEFAULT_TIME_LIMIT_SECONDS,
            end_attempt=end_instance,
            log_stream=log_stream,
        )
        for _ in range(2)
    )
    return Implementation(
        "ours",
        lambda headers: here.handle("POST", headers, b"").status,
        counter,
        elsewhere=lambda headers: there.handle("POST", headers, b"").status,
    )


def baseline(emulator_host: str, project: str, job: Callable[[], None] | None = None) -> Implementation:
    db, counter = counted_emulator_client(emulator_host, project)
    handler = BaselineHandler(db, COLLECTION) if job is None else BaselineHandler(db, COLLECTION, job)
    return Implementation("baseline", lambda headers: handler.handle(headers)[1], counter)


def turns(repeat: int, first: T, second: T) -> Iterator[T]:
    """Alternate who goes first, so neither always runs on a warmer (or busier) emulator."""
    yield from (first, second) if repeat % 2 == 0 else (second, first)


def warm_up(impls: tuple[Implementation, Implementation], rounds: int = 5) -> None:
    """Channel set-up and first-call imports are cold-start costs (case 5), not per-run costs."""
    for _ in range(rounds):
        for impl in impls:
            headers = impl.runs.headers()
            impl.deliver(headers)
            impl.deliver(headers)


# What a delivery of a run is, in cases 1 and 2: the first one, the same run again at another
# instance (which knows nothing of it), then again at the instance that ran it.
FIRST, ELSEWHERE, SAME = "first", "elsewhere", "same"
_CASES = {
    FIRST: ("1. first delivery (in process, no-op job)", "Firestore RPCs per run"),
    ELSEWHERE: ("2. duplicate of a completed run, another instance", "Firestore RPCs per delivery"),
    SAME: ("2. duplicate of a completed run, same instance", "Firestore RPCs per delivery"),
}


def first_and_duplicates(
    ours_impl: Implementation,
    base_impl: Implementation,
    rounds: int,
    per_round: int,
    *,
    rtt_ms: float | None = None,
    progress: Progress = print,
) -> list[Metric]:
    """Cases 1 and 2 on the same runs: every fresh run is delivered once, then to another
    instance (ours: the ledger answers), then to the same one (ours: its cache answers). The
    baseline has no instance state, so its two duplicates are the same call."""
    samples: dict[str, dict[str, list[float]]] = {kind: {"ours": [], "baseline": []} for kind in _CASES}
    counts: dict[str, dict[str, list[float]]] = {kind: {"ours": [], "baseline": []} for kind in _CASES}
    cpu: dict[str, dict[str, list[float]]] = {kind: {"ours": [], "baseline": []} for kind in _CASES}
    for round_ in range(rounds):
        progress(f"cases 1-2: round {round_ + 1}/{rounds} ({per_round} runs each)")
        for index in range(per_round):
            for impl in turns(round_ * per_round + index, ours_impl, base_impl):
                headers = impl.runs.headers()
                for kind in (FIRST, ELSEWHERE, SAME):
                    delivery, count = impl.rpcs(headers, elsewhere=kind == ELSEWHERE)
                    if delivery.status != 200:
                        raise RuntimeError(f"{impl.label}: {kind} delivery answered {delivery.status}")
                    samples[kind][impl.label].append(delivery.seconds * 1000)
                    counts[kind][impl.label].append(count)
                    cpu[kind][impl.label].append(delivery.cpu_seconds * 1000)
    metrics: list[Metric] = []
    for kind, (case, rpc_name) in _CASES.items():
        latency, rpcs, used = samples[kind], counts[kind], cpu[kind]
        metrics.append(metric(case, "latency", "ms", "lower", latency["ours"], latency["baseline"], rtt_ms))
        metrics.append(metric(case, rpc_name, "RPCs", "lower", rpcs["ours"], rpcs["baseline"], rtt_ms))
        metrics.append(metric(case, CPU_METRIC, CPU_UNIT, "lower", used["ours"], used["baseline"], rtt_ms))
    return metrics


@dataclass(frozen=True)
class StormResult:
    executions: int
    errors: int
    conflicts: int  # 409: the designed "retry later", not an error
    latencies_ms: list[float]
    cpu_seconds: float  # this process's, over the whole storm


def storm(impl: Implementation, pool: ThreadPoolExecutor, size: int) -> StormResult:
    """`size` deliveries of one run released at once by a barrier, like a burst of retries."""
    headers = impl.runs.headers()
    barrier = threading.Barrier(size)

    def one() -> Delivery:
        barrier.wait()
        return impl.deliver(headers)

    EXECUTIONS.take()
    cpu_started = time.process_time()
    deliveries = [future.result() for future in [pool.submit(one) for _ in range(size)]]
    return StormResult(
        executions=EXECUTIONS.take(),
        errors=sum(d.error for d in deliveries),
        conflicts=sum(d.status == 409 for d in deliveries),
        latencies_ms=[d.seconds * 1000 for d in deliveries],
        cpu_seconds=time.process_time() - cpu_started,
    )


def duplicate_storm(
    ours_impl: Implementation,
    base_impl: Implementation,
    storms: int,
    *,
    rtt_ms: float | None = None,
    progress: Progress = print,
    size: int = STORM_SIZE,
) -> tuple[list[Metric], dict[str, list[StormResult]]]:
    results: dict[str, list[StormResult]] = {"ours": [], "baseline": []}
    with ThreadPoolExecutor(max_workers=size, thread_name_prefix="storm") as pool:
        for repeat in range(storms):
            progress(f"case 3: storm {repeat + 1}/{storms}")
            for impl in turns(repeat, ours_impl, base_impl):
                results[impl.label].append(storm(impl, pool, size))
    case = f"3. duplicate storm ({size} concurrent deliveries of one run)"

    def values(label: str, pick: Callable[[StormResult], float]) -> list[float]:
        return [pick(result) for result in results[label]]

    def executions(r: StormResult) -> float:
        return r.executions

    def error_share(r: StormResult) -> float:
        return 100 * r.errors / size

    def p95(r: StormResult) -> float:
        return sorted(r.latencies_ms)[max(0, -(-95 * len(r.latencies_ms) // 100) - 1)]

    def cpu_per_delivery(r: StormResult) -> float:
        return r.cpu_seconds * 1000 / size

    metrics = [
        metric(
            case,
            "executions per run",
            "runs",
            "lower",
            values("ours", executions),
            values("baseline", executions),
            rtt_ms,
        ),
        metric(
            case,
            "deliveries that error (5xx)",
            "%",
            "lower",
            values("ours", error_share),
            values("baseline", error_share),
            rtt_ms,
        ),
        metric(
            case, "latency p95 per storm", "ms", "lower", values("ours", p95), values("baseline", p95), rtt_ms
        ),
        metric(
            case,
            CPU_METRIC,
            CPU_UNIT,
            "lower",
            values("ours", cpu_per_delivery),
            values("baseline", cpu_per_delivery),
            rtt_ms,
        ),
    ]
    return metrics, results


def one_read_ms(host: str, project: str, reads: int) -> list[float]:
    """What one Firestore RPC costs on this route: a read of one small document, timed alone.
    The RTT plus whatever the proxy, the emulator and the client add to every RPC."""
    db, _ = counted_emulator_client(host, project)
    document = db.collection(COLLECTION).document(f"one-read-{uuid.uuid4().hex}")
    document.set({"probe": True})
    document.get()  # the channel's set-up is not an RPC's cost
    times: list[float] = []
    for _ in range(reads):
        started = time.perf_counter()
        document.get()
        times.append((time.perf_counter() - started) * 1000)
    return times


def null_log() -> TextIO:
    """Ours logs one JSON line per request; it pays the formatting, the terminal does not."""
    return open(os.devnull, "w")
