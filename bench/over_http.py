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
"""

from __future__ import annotations

import contextlib
import http.client
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.inprocess import ELSEWHERE, FIRST, SAME, Progress, RunIds, turns
from bench.network import Route, counted_route
from bench.stats import Metric, metric
from localrun.function_server import FunctionServer

# The rows' case names: after the number, HTTP_MARK tells them from their in-process twins.
HTTP_MARK = "over HTTP: "
CASES = {
    FIRST: (f"1. {HTTP_MARK}first delivery (no-op job)", "Firestore RPCs per run"),
    ELSEWHERE: (
        f"2. {HTTP_MARK}duplicate of a completed run, another instance",
        "Firestore RPCs per delivery",
    ),
    SAME: (f"2. {HTTP_MARK}duplicate of a completed run, same instance", "Firestore RPCs per delivery"),
}
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


class Instance:
    """One served instance, a keep-alive connection to it, and the route it reaches Firestore by."""

    def __init__(self, server: FunctionServer, route: Route | None = None) -> None:
        self.server = server
        self.route = route
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
        started = time.perf_counter()
        self._connection.request("POST", path, body=b"", headers=dict(headers))
        response = self._connection.getresponse()
        body = response.read()
        seconds = time.perf_counter() - started
        self._used_at = time.monotonic()
        return Answer(response.status, seconds, body)

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
) -> Iterator[Pair]:
    """Two instances of `source`, each with a route of its own to the emulator."""
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
            instance = Instance(server, route)
            stack.callback(instance.close)
            instances.append(instance)
        yield Pair(label, *instances)


def deliver_all(
    ours: Pair, base: Pair, rounds: int, per_round: int, progress: Progress
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, list[float]]]]:
    """Every fresh run delivered first, elsewhere, same; latencies (ms) and RPCs by kind and
    side (no RPC entries where the route does not count)."""
    latency: dict[str, dict[str, list[float]]] = {kind: {"ours": [], "baseline": []} for kind in CASES}
    rpcs: dict[str, dict[str, list[float]]] = {kind: {"ours": [], "baseline": []} for kind in CASES}
    for round_ in range(rounds):
        progress(f"cases 1-2 over HTTP: round {round_ + 1}/{rounds} ({per_round} runs each)")
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
                    after = route.rpcs() if route is not None else None
                    if before is not None and after is not None:
                        rpcs[kind][pair.label].append(after - before)
    return latency, rpcs


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
) -> list[Metric]:
    """The HTTP rows at one RTT. At RTT 0 the timed instances reach the emulator directly, and
    their RPCs are counted in a short pass of their own through a proxy without delay."""
    with (
        served_pair("ours", ours_source, env, emulator_host, rtt_ms, log_dir, count=rtt_ms > 0) as ours,
        served_pair("baseline", base_source, env, emulator_host, rtt_ms, log_dir, count=rtt_ms > 0) as base,
    ):
        ours.warm_up()
        base.warm_up()
        latency, rpcs = deliver_all(ours, base, rounds, per_round, progress)
    if rtt_ms == 0:
        progress("cases 1-2 over HTTP: counting RPCs through a proxy without delay")
        with (
            served_pair("ours-counted", ours_source, env, emulator_host, 0, log_dir, count=True) as ours,
            served_pair("baseline-counted", base_source, env, emulator_host, 0, log_dir, count=True) as base,
        ):
            ours.label, base.label = "ours", "baseline"
            ours.warm_up(2)
            base.warm_up(2)
            _, rpcs = deliver_all(ours, base, 1, per_round, progress)
    metrics: list[Metric] = []
    for kind, (case, rpc_name) in CASES.items():
        metrics.append(
            metric(case, "latency", "ms", "lower", latency[kind]["ours"], latency[kind]["baseline"], rtt_ms)
        )
        metrics.append(
            metric(case, rpc_name, "RPCs", "lower", rpcs[kind]["ours"], rpcs[kind]["baseline"], rtt_ms)
        )
    return metrics
