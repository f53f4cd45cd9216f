"""Cases 1-2 over HTTP: what Cloud Scheduler sees, at every modelled round trip.

Cloud Scheduler never calls the handler in process: each delivery is an HTTP request through
the Functions Framework. Here both implementations are served exactly as in cases 4-6
(bench/served.py: the same launcher, the same gunicorn options), two instances each, every
instance reaching the emulator through a route of its own `rtt` ms away (bench/network.py),
which also counts the RPCs the instance sends. One keep-alive connection per instance, as
Cloud Run's front end keeps; one delivery at a time, timed from the request's first byte to
the answer's last, as the caller sees it.

Each fresh run is delivered to instance A (case 1), then again to instance B, which knows
nothing of it (case 2, another instance), then again to A (case 2, same instance). The
baseline keeps nothing per instance, so its two duplicates are the same call at two servers.
Each delivery's CPU is the serving instance's, read from outside it (bench/cpu.py).

With quotas (bench/cpu_quota.py) the same runs are delivered to instances each confined to
a CPU quota of its own, as on Cloud Run's default instance: their rows carry QUOTA_MARK, and
no RPC count (the quota changes the time, not what is sent).
"""

from __future__ import annotations

import contextlib
import http.client
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.cpu import CPU_METRIC, CPU_UNIT, ServedCpu
from bench.cpu_quota import CpuQuotas
from bench.inprocess import ELSEWHERE, FIRST, SAME, Progress, RunIds, turns
from bench.network import Route, counted_route
from bench.stats import Metric, metric
from localrun.function_server import FunctionServer

# The rows' case names: after the number, HTTP_MARK tells them from their in-process twins,
# QUOTA_MARK the rows of instances confined to a CPU quota from both.
HTTP_MARK = "over HTTP: "
QUOTA_MARK = "over HTTP, CPU quota: "
_KINDS = {
    FIRST: ("1. {mark}first delivery (no-op job)", "Firestore RPCs per run"),
    ELSEWHERE: ("2. {mark}duplicate of a completed run, another instance", "Firestore RPCs per delivery"),
    SAME: ("2. {mark}duplicate of a completed run, same instance", "Firestore RPCs per delivery"),
}
CASES = {kind: (case.format(mark=HTTP_MARK), rpcs) for kind, (case, rpcs) in _KINDS.items()}
QUOTA_CASES = {kind: (case.format(mark=QUOTA_MARK), rpcs) for kind, (case, rpcs) in _KINDS.items()}
WARM_UP_RUNS = 10  # per instance: first requests pay the channel, imports and threads
REQUEST_TIMEOUT_SECONDS = 60
# gunicorn closes a kept-alive connection idle for its keepalive (2 s by default); one idle
# for longer than this is opened afresh before the request is timed, never mid-request.
IDLE_RECONNECT_SECONDS = 1.0


@dataclass(frozen=True)
class Answer:
    status: int
    seconds: float
    body: bytes
    cpu_seconds: float  # the server's, from sending the request to reading the answer


class Instance:
    """One served instance, a keep-alive connection to it, and the route it reaches Firestore by."""

    def __init__(self, server: FunctionServer, route: Route | None = None) -> None:
        self.server = server
        self.route = route
        assert server.pid is not None, "an instance is a started server"
        self.cpu = ServedCpu(server.pid)
        self._connection = http.client.HTTPConnection(
            "127.0.0.1", server.port, timeout=REQUEST_TIMEOUT_SECONDS
        )
        self._used_at = -math.inf

    def _fresh(self) -> None:
        """A connection the server keeps: reopened (untimed) when it has been idle too long."""
        if time.monotonic() - self._used_at > IDLE_RECONNECT_SECONDS:
            self._connection.close()
            self._connection.connect()

    def post(self, headers: Mapping[str, str], path: str = "/") -> Answer:
        """One delivery, timed from sending the request to reading the answer's last byte."""
        self._fresh()
        cpu_started = self.cpu.seconds()
        started = time.perf_counter()
        self._connection.request("POST", path, body=b"", headers=dict(headers))
        response = self._connection.getresponse()
        body = response.read()
        seconds = time.perf_counter() - started
        cpu_seconds = self.cpu.seconds() - cpu_started
        self._used_at = time.monotonic()
        return Answer(response.status, seconds, body, cpu_seconds)

    def get(self, path: str) -> bytes:
        self._fresh()
        self._connection.request("GET", path)
        response = self._connection.getresponse()
        body = response.read()
        self._used_at = time.monotonic()
        if response.status != 200:
            raise RuntimeError(f"GET {path} answered {response.status}: {body[:200]!r}")
        return body

    def close(self) -> None:
        self._connection.close()


class Pair:
    """Instances A and B of one implementation, and its fresh runs."""

    def __init__(self, label: str, here: Instance, there: Instance) -> None:
        self.label = label
        self.here = here
        self.there = there
        self.runs = RunIds(f"http-{label}")

    def at(self, kind: str) -> Instance:
        return self.there if kind == ELSEWHERE else self.here

    def warm_up(self, runs: int = WARM_UP_RUNS) -> None:
        for _ in range(runs):
            headers = self.runs.headers()
            for kind in (FIRST, ELSEWHERE, SAME):
                self.at(kind).post(headers)


@contextlib.contextmanager
def served_pair(
    label: str,
    source: Path,
    env: Mapping[str, str],
    emulator_host: str,
    rtt_ms: float,
    log_dir: Path,
    *,
    count: bool,
    target: str = "handle_scheduled_job",
    quotas: CpuQuotas | None = None,
) -> Iterator[Pair]:
    """Two instances of `source`, each with a route of its own to the emulator, and each
    confined to a cgroup of its own when there are `quotas`."""
    with contextlib.ExitStack() as stack:
        instances: list[Instance] = []
        for name in ("a", "b"):
            route = stack.enter_context(counted_route(emulator_host, rtt_ms, count=count))
            server = FunctionServer(
                {**env, "FIRESTORE_EMULATOR_HOST": route.host},
                log_dir / f"{label}-{name}-rtt{rtt_ms:g}.log",
                source=source,
                target=target,
            )
            server.start()
            stack.callback(server.stop)
            if quotas is not None and server.pid is not None:
                quotas.confine(server.pid)
            instance = Instance(server, route)
            stack.callback(instance.close)
            instances.append(instance)
        yield Pair(label, *instances)


# By kind of delivery, then by side: the samples of one measure.
Samples = dict[str, dict[str, list[float]]]


@dataclass(frozen=True)
class Measured:
    """Per kind and side: latencies (ms), RPCs (none where the route does not count) and the
    serving instance's CPU (ms)."""

    latency: Samples
    rpcs: Samples
    cpu: Samples


def _samples() -> Samples:
    return {kind: {"ours": [], "baseline": []} for kind in CASES}


def deliver_all(
    ours: Pair, base: Pair, rounds: int, per_round: int, progress: Progress, what: str = "cases 1-2 over HTTP"
) -> Measured:
    """Every fresh run delivered first, elsewhere, same."""
    latency, rpcs, cpu = _samples(), _samples(), _samples()
    for round_ in range(rounds):
        progress(f"{what}: round {round_ + 1}/{rounds} ({per_round} runs each)")
        for index in range(per_round):
            for pair in turns(round_ * per_round + index, ours, base):
                headers = pair.runs.headers()
                for kind in (FIRST, ELSEWHERE, SAME):
                    instance = pair.at(kind)
                    route = instance.route
                    before = route.rpcs() if route is not None else None
                    answer = instance.post(headers)
                    if answer.status != 200:
                        said = answer.body[:300]
                        raise RuntimeError(
                            f"{pair.label}: {kind} over HTTP answered {answer.status}: {said!r}"
                        )
                    latency[kind][pair.label].append(answer.seconds * 1000)
                    cpu[kind][pair.label].append(answer.cpu_seconds * 1000)
                    after = route.rpcs() if route is not None else None
                    if before is not None and after is not None:
                        rpcs[kind][pair.label].append(after - before)
    return Measured(latency, rpcs, cpu)


def first_and_duplicates(
    env: Mapping[str, str],
    ours_source: Path,
    base_source: Path,
    emulator_host: str,
    rtt_ms: float,
    log_dir: Path,
    rounds: int,
    per_round: int,
    progress: Progress,
    quotas: CpuQuotas | None = None,
) -> list[Metric]:
    """The HTTP rows at one RTT. At RTT 0 the timed instances reach the emulator directly, and
    their RPCs are counted in a short pass of their own through a proxy without delay. With
    `quotas`, the rows of instances confined to them (latency and CPU only)."""
    count = rtt_ms > 0 and quotas is None
    what = "cases 1-2 over HTTP" + (f", {quotas.quota.name}" if quotas is not None else "")
    suffix = "-quota" if quotas is not None else ""
    with (
        served_pair(
            f"ours{suffix}", ours_source, env, emulator_host, rtt_ms, log_dir, count=count, quotas=quotas
        ) as ours,
        served_pair(
            f"baseline{suffix}", base_source, env, emulator_host, rtt_ms, log_dir, count=count, quotas=quotas
        ) as base,
    ):
        ours.label, base.label = "ours", "baseline"
        ours.warm_up()
        base.warm_up()
        measured = deliver_all(ours, base, rounds, per_round, progress, what)
    metrics: list[Metric] = []
    if quotas is not None:
        for kind, (case, _) in QUOTA_CASES.items():
            metrics += _rows(case, measured, kind, rtt_ms, rpcs=None)
        return metrics
    rpcs = measured.rpcs
    if rtt_ms == 0:
        progress("cases 1-2 over HTTP: counting RPCs through a proxy without delay")
        with (
            served_pair("ours-counted", ours_source, env, emulator_host, 0, log_dir, count=True) as ours,
            served_pair("baseline-counted", base_source, env, emulator_host, 0, log_dir, count=True) as base,
        ):
            ours.label, base.label = "ours", "baseline"
            ours.warm_up(2)
            base.warm_up(2)
            rpcs = deliver_all(ours, base, 1, per_round, progress).rpcs
    for kind, (case, rpc_name) in CASES.items():
        metrics += _rows(case, measured, kind, rtt_ms, rpcs=(rpc_name, rpcs))
    return metrics


def _rows(
    case: str, measured: Measured, kind: str, rtt_ms: float, *, rpcs: tuple[str, Samples] | None
) -> list[Metric]:
    """Latency, RPCs (unless None: not counted) and CPU of one kind of delivery."""
    latency, cpu = measured.latency[kind], measured.cpu[kind]
    rows = [metric(case, "latency", "ms", "lower", latency["ours"], latency["baseline"], rtt_ms)]
    if rpcs is not None:
        name, counted = rpcs[0], rpcs[1][kind]
        rows.append(metric(case, name, "RPCs", "lower", counted["ours"], counted["baseline"], rtt_ms))
    rows.append(metric(case, CPU_METRIC, CPU_UNIT, "lower", cpu["ours"], cpu["baseline"], rtt_ms))
    return rows
