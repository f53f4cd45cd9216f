"""Cases 4-6: both handlers behind the real Functions Framework, over loopback HTTP.

The baseline is served by the same launcher as ours (a FunctionServer pointed at another
source file), with the same gunicorn options, so the two differ only in what the handler does.
Each case also reports the server's CPU (bench/cpu.py): per request, and to the first response.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import requests

from bench.cpu import CPU_UNIT, ServedCpu
from bench.imports import import_profile
from bench.inprocess import NOOP_JOB, Progress, RunIds, turns
from bench.stats import Metric, Summary, metric
from localrun import FUNCTION_DIR
from localrun.function_server import FunctionServer, FunctionServerError

REPO = FUNCTION_DIR.parent
BASELINE_SOURCE = REPO / "bench" / "baseline_app.py"
OURS_SOURCE = FUNCTION_DIR / "main.py"
SERVER_THREADS = "8"
# Cases 4 and 6: the server's CPU over a burst, divided by its requests.
CPU_PER_REQUEST = "CPU of the server per request"
CLIENT_THREADS = 8


class SourceServer(FunctionServer):
    """A FunctionServer for any source file, which can also time its own cold start."""

    def __init__(self, env: Mapping[str, str], log_path: Path, source: Path, label: str) -> None:
        super().__init__(env, log_path, source=source)
        self.label = label
        self.runs = RunIds(f"http-{label}")

    def cold_start_seconds(self) -> tuple[float, float]:
        """From spawning the process to the response to its first scheduled run: import,
        framework start-up, Firestore client creation and the run itself, as after a scale-up;
        and the CPU the server spent on all that."""
        started = time.perf_counter()
        self.spawn()
        cpu_seconds = 0.0
        request = scheduled_request(self.url, self.runs.headers())
        try:
            while True:
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        status = response.status
                    break
                except urllib.error.HTTPError as error:
                    status = error.code
                    break
                except (urllib.error.URLError, ConnectionError):
                    if not self.running:
                        raise FunctionServerError(f"{self.label} server died; see {self._log_path}") from None
                    time.sleep(0.005)
            elapsed = time.perf_counter() - started
            assert self.pid is not None
            cpu_seconds = ServedCpu(self.pid).seconds()
        finally:
            self.stop()
        if status != 200:
            raise FunctionServerError(f"{self.label}: first scheduled run answered {status}")
        return elapsed, cpu_seconds


def scheduled_request(url: str, headers: Mapping[str, str]) -> urllib.request.Request:
    return urllib.request.Request(url, data=b"", headers=dict(headers), method="POST")


def server_env(emulator_host: str, project: str) -> dict[str, str]:
    return {
        "GOOGLE_CLOUD_PROJECT": project,
        "FIRESTORE_EMULATOR_HOST": emulator_host,
        "JOB_HANDLER": NOOP_JOB,
        "THREADS": SERVER_THREADS,
    }


@dataclass(frozen=True)
class Fired:
    """A burst of requests at one server: how fast it answered, and what it cost the server."""

    rate: float  # requests per second
    failures: int  # non-200 answers
    cpu_ms: float  # the server's CPU per request


def fire(server: SourceServer | FunctionServer, runs: RunIds, count: int) -> Fired:
    """`count` fresh runs from CLIENT_THREADS keep-alive clients."""
    return fire_batches(
        server, [[runs.headers() for _ in range(count // CLIENT_THREADS)] for _ in range(CLIENT_THREADS)]
    )


def many_jobs_batches(label: str, jobs: int, runs_per_job: int) -> list[list[dict[str, str]]]:
    """`jobs` distinct jobs with `runs_per_job` fresh runs each, dealt to the clients so that
    consecutive requests of one client belong to different jobs, as when many schedules fire
    in the same minute."""
    job_runs = [RunIds(f"{label}-job{index}") for index in range(jobs)]
    deliveries = [runs.headers() for _ in range(runs_per_job) for runs in job_runs]
    return [deliveries[client::CLIENT_THREADS] for client in range(CLIENT_THREADS)]


def fire_batches(server: SourceServer | FunctionServer, batches: list[list[dict[str, str]]]) -> Fired:
    """One keep-alive client per batch, all started together."""
    assert server.pid is not None, "requests go to a started server"
    cpu = ServedCpu(server.pid)
    barrier = threading.Barrier(CLIENT_THREADS + 1)

    def client(batch: list[dict[str, str]]) -> int:
        failures = 0
        with requests.Session() as session:
            barrier.wait()
            for headers in batch:
                failures += session.post(server.url, headers=headers, data=b"", timeout=60).status_code != 200
        return failures

    with ThreadPoolExecutor(max_workers=len(batches)) as pool:
        futures = [pool.submit(client, batch) for batch in batches]
        cpu_started = cpu.seconds()
        barrier.wait()
        started = time.perf_counter()
        failures = sum(future.result() for future in futures)
        elapsed = time.perf_counter() - started
        cpu_seconds = cpu.seconds() - cpu_started
    count = sum(map(len, batches))
    return Fired(count / elapsed, failures, cpu_seconds * 1000 / count)


def http_throughput(
    emulator_host: str,
    project: str,
    log_dir: Path,
    repeats: int,
    requests_per_repeat: int,
    progress: Progress = print,
) -> list[Metric]:
    env = server_env(emulator_host, project)
    ours = SourceServer(env, log_dir / "ours-server.log", OURS_SOURCE, "ours")
    base = SourceServer(env, log_dir / "baseline-server.log", BASELINE_SOURCE, "baseline")
    rates: dict[str, list[float]] = {"ours": [], "baseline": []}
    cpu: dict[str, list[float]] = {"ours": [], "baseline": []}
    failures: dict[str, int] = {"ours": 0, "baseline": 0}
    ours.start()
    try:
        base.start()
        try:
            for server in (ours, base):
                fire(server, server.runs, CLIENT_THREADS * 4)  # warm: client, channel, threads
            for repeat in range(repeats):
                progress(f"case 4: round {repeat + 1}/{repeats}")
                for server in turns(repeat, ours, base):
                    fired = fire(server, server.runs, requests_per_repeat)
                    rates[server.label].append(fired.rate)
                    cpu[server.label].append(fired.cpu_ms)
                    failures[server.label] += fired.failures
        finally:
            base.stop()
    finally:
        ours.stop()
    if failures["ours"] or failures["baseline"]:
        raise RuntimeError(f"fresh runs over HTTP answered non-200: {failures}")
    case = (
        f"4. end to end over HTTP (Functions Framework, {SERVER_THREADS} threads, {CLIENT_THREADS} clients)"
    )
    return [
        metric(case, "fresh runs per second", "req/s", "higher", rates["ours"], rates["baseline"]),
        metric(case, CPU_PER_REQUEST, CPU_UNIT, "lower", cpu["ours"], cpu["baseline"]),
    ]


def many_jobs_throughput(
    emulator_host: str,
    project: str,
    log_dir: Path,
    repeats: int,
    jobs: int,
    runs_per_job: int,
    progress: Progress = print,
) -> list[Metric]:
    """Case 6: runs of many jobs at once, each a new run id; every repeat uses new jobs."""
    env = server_env(emulator_host, project)
    servers = [
        SourceServer(env, log_dir / "ours-many-jobs.log", OURS_SOURCE, "ours"),
        SourceServer(env, log_dir / "baseline-many-jobs.log", BASELINE_SOURCE, "baseline"),
    ]
    rates: dict[str, list[float]] = {"ours": [], "baseline": []}
    cpu: dict[str, list[float]] = {"ours": [], "baseline": []}
    failures: dict[str, int] = {"ours": 0, "baseline": 0}
    with contextlib.ExitStack() as running:
        for server in servers:
            server.start()
            running.callback(server.stop)
        for server in servers:
            fire(server, server.runs, CLIENT_THREADS * 4)  # warm: client, channel, threads
        for repeat in range(repeats):
            progress(f"case 6: round {repeat + 1}/{repeats}")
            for server in turns(repeat, *servers):
                fired = fire_batches(
                    server, many_jobs_batches(f"{server.label}-{repeat}", jobs, runs_per_job)
                )
                rates[server.label].append(fired.rate)
                cpu[server.label].append(fired.cpu_ms)
                failures[server.label] += fired.failures
    if failures["ours"] or failures["baseline"]:
        raise RuntimeError(f"runs of many jobs over HTTP answered non-200: {failures}")
    case = f"6. many jobs over HTTP ({jobs} jobs x {runs_per_job} runs, {CLIENT_THREADS} clients)"
    return [
        metric(case, "runs per second", "runs/s", "higher", rates["ours"], rates["baseline"]),
        metric(case, CPU_PER_REQUEST, CPU_UNIT, "lower", cpu["ours"], cpu["baseline"]),
    ]


def import_seconds(source: Path, env: Mapping[str, str]) -> float:
    """Import alone, in a fresh interpreter: what every new instance pays before serving."""
    module = source.stem
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    completed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=source.parent,
        env={**env, "PYTHONPATH": f"{source.parent}"},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(completed.stdout.strip().splitlines()[-1])


def cold_start(
    emulator_host: str, project: str, log_dir: Path, repeats: int, progress: Progress = print
) -> tuple[list[Metric], dict[str, dict[str, Summary]]]:
    """Rows for the case, and the import time per dependency (ms) of each implementation."""
    env = server_env(emulator_host, project)
    full_env = {**os.environ, **env}
    servers = {
        "ours": SourceServer(env, log_dir / "ours-cold.log", OURS_SOURCE, "ours"),
        "baseline": SourceServer(env, log_dir / "baseline-cold.log", BASELINE_SOURCE, "baseline"),
    }
    first: dict[str, list[float]] = {"ours": [], "baseline": []}
    first_cpu: dict[str, list[float]] = {"ours": [], "baseline": []}
    imports: dict[str, list[float]] = {"ours": [], "baseline": []}
    by_owner: dict[str, list[dict[str, float]]] = {"ours": [], "baseline": []}
    for repeat in range(repeats):
        progress(f"case 5: fresh process {repeat + 1}/{repeats}")
        for server in turns(repeat, servers["ours"], servers["baseline"]):
            seconds, cpu_seconds = server.cold_start_seconds()
            first[server.label].append(seconds * 1000)
            first_cpu[server.label].append(cpu_seconds * 1000)
            imports[server.label].append(import_seconds(server.source, full_env) * 1000)
            by_owner[server.label].append(import_profile(server.source, env))
    case = "5. cold start (fresh process)"
    metrics = [
        metric(case, "spawn to first run's response", "ms", "lower", first["ours"], first["baseline"]),
        metric(
            case,
            "CPU of the server to first run's response",
            CPU_UNIT,
            "lower",
            first_cpu["ours"],
            first_cpu["baseline"],
        ),
        metric(case, "import of the entry module", "ms", "lower", imports["ours"], imports["baseline"]),
    ]
    return metrics, {label: _per_owner(profiles) for label, profiles in by_owner.items()}


def _per_owner(profiles: list[dict[str, float]]) -> dict[str, Summary]:
    """One summary per owner over the fresh interpreters; an owner one of them did not load
    counts 0 ms there."""
    owners = {owner for profile in profiles for owner in profile}
    return {owner: Summary.of([profile.get(owner, 0.0) for profile in profiles]) for owner in owners}
