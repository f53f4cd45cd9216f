"""`make demo`: watch exactly-once hold under at-least-once delivery, before deploying anything.

Starts the Firestore emulator and the function (Functions Framework, loopback), fires the dev
stack's upcoming scheduled runs through the local Cloud Scheduler with seeded faults, then
counts what actually executed in Firestore. The exit code is the verdict, so CI can run it.

Exit codes: 0 every run executed exactly once; 1 some run executed twice or never;
2 the demo could not run (bad option, bad stack config, a speed-up whose compressed timing
breaks a timing rule, emulator or server failed to start, an instance never answered 2xx).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from google.cloud import firestore

from infra.config.schema import FUNCTION_DIR, REPO_ROOT, SettingsError
from infra.settings.jobs import JobSettings
from infra.settings.loading import load_stack_settings
from infra.settings.stack import StackSettings
from infra.timing import rules as timing
from jobs.demo import run_demo_job
from localrun.compression import BUSY_ROUND_TRIP_SECONDS, CompressedTiming
from localrun.delivery import RunResult
from localrun.emulator import EMULATOR_HOST_ENV, EmulatorError, firestore_emulator
from localrun.faults import JOB_FAULTS, Fault, FaultRates, RunFaults, plan_faults
from localrun.function_log import attempts_ended, executions
from localrun.function_server import FunctionServer, FunctionServerError
from localrun.instances import InstancePool, WarmUpError, live_claims, wait_for
from localrun.report import (
    RunFacts,
    build_report,
    delivery_token,
    in_order_sent,
    render_table,
    verdict_line,
)
from localrun.scheduler import CompressedClock, LocalScheduler, fire_times
from localrun.tcp_proxy import TcpProxy, tcp_proxy

DEFAULT_OUTPUT_DIR = REPO_ROOT / ".demo"
# The handler whose body the slow, crash and fail faults speak (function/jobs/demo.py).
DEMO_JOB = f"{run_demo_job.__module__}:{run_demo_job.__name__}"
EXIT_OK, EXIT_NOT_EXACTLY_ONCE, EXIT_CANNOT_RUN = 0, 1, 2


@dataclass(frozen=True)
class SimulationOptions:
    runs: int = 20
    seed: int = 7
    speedup: float = 20.0
    interval_seconds: float = 0.25  # wall clock between two fired runs
    instances: int = 3  # the dev stack's maxInstances
    rates: FaultRates = field(default_factory=FaultRates)
    # Added to every Firestore round trip of the function (a delaying proxy in front of the
    # emulator), as if the database were far away; 0: none.
    firestore_rtt_seconds: float = 0.0

    def compressed(self, settings: StackSettings, job: JobSettings) -> CompressedTiming:
        """The function's timing for a run of `job`: the slowest round trip it must ride out
        is a busy machine's, plus the delay added on purpose."""
        round_trip = BUSY_ROUND_TRIP_SECONDS + self.firestore_rtt_seconds
        return CompressedTiming.of(settings, self.speedup, round_trip_seconds=round_trip, job=job)


def simulate(
    settings: StackSettings,
    job: JobSettings,
    options: SimulationOptions,
    *,
    emulator_host: str,
    firestore_project: str,
    log_dir: Path,
    plan: Sequence[RunFaults] | None = None,
    progress: TextIO | None = None,
    start: datetime | None = None,
    function_dir: Path = FUNCTION_DIR,
) -> dict[str, Any]:
    """Serve the function (from `function_dir`), deliver `options.runs` runs of `job`, count
    executions; the JSON report. `plan` overrides the seeded fault plan (tests force a crash
    on a given run)."""
    began = time.monotonic()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "function.log"
    log_path.unlink(missing_ok=True)
    say = _printer(progress)

    handler = settings.handler_of(job)
    rates = options.rates
    if handler != DEMO_JOB and any(rates.rate(fault) for fault in JOB_FAULTS):
        rates = rates.without(JOB_FAULTS)
        say(
            f"{job.name!r} runs {handler}, not the demo job: injecting duplicates and lost answers only "
            f"({', '.join(fault.value for fault in JOB_FAULTS)} are carried out by the demo job's body)"
        )
    faults = list(plan) if plan is not None else plan_faults(options.runs, rates, options.seed)
    times = fire_times(job.schedule, job.time_zone, start or datetime.now(UTC), len(faults))
    clock = CompressedClock(options.speedup)
    compressed = options.compressed(settings, job)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_environment(EMULATOR_HOST_ENV, emulator_host))
        proxy: TcpProxy | None = None
        if options.firestore_rtt_seconds:
            # The function reaches Firestore through a delaying proxy; the counts read it directly.
            delay = tcp_proxy(emulator_host, round_trip_seconds=options.firestore_rtt_seconds)
            proxy = stack.enter_context(delay)
        function_firestore = proxy.host if proxy else emulator_host
        env = compressed.function_env(
            settings, firestore_project=firestore_project, emulator_host=function_firestore
        )
        db = firestore.Client(project=firestore_project)
        servers = [
            FunctionServer(env, log_path, source=function_dir / "main.py") for _ in range(options.instances)
        ]
        pool = InstancePool(
            servers, db, settings.runs_collection, time_limit_seconds=compressed.time_limit_seconds
        )
        say(f"serving the function on {', '.join(s.url for s in servers)} (log: {_shown(log_path)})")
        if options.firestore_rtt_seconds:
            say(f"every Firestore round trip of the function delayed by {options.firestore_rtt_seconds:g}s")
        deadline = compressed.attempt_deadline_seconds(settings, job)
        lease, limit = compressed.lease_seconds, compressed.time_limit_seconds
        floors = compressed.floors()
        say(
            f"wall clock: lease {lease:g}s, time limit {limit:g}s, attempt deadline {deadline:g}s"
            + (f" ({floors})" if floors else "")
        )
        done = 0
        lock = threading.Lock()

        def on_run_done(result: RunResult) -> None:
            nonlocal done
            with lock:
                done += 1
                codes = " ".join(delivery_token(d) for d in in_order_sent(result.deliveries))
                state = "acknowledged" if result.acknowledged else "retries exhausted"
                run = f"run {result.index + 1:>3} {result.schedule_time}"
                say(f"  [{done:>3}/{len(times)}] {run}: {codes} ({state})")

        scheduler = LocalScheduler(
            settings,
            job,
            pool,
            clock=clock,
            compressed=compressed,
            crash=pool.crash_when_inside,
            on_run_done=on_run_done,
        )
        try:
            pool.start()
            pool.warm_up(settings, job)
            say(
                f"firing {len(times)} runs of {job.name!r} ({job.schedule}, {job.time_zone}) "
                f"at speed-up x{options.speedup:g}, seed {options.seed}"
            )
            results = scheduler.run_all(times, faults, interval_seconds=options.interval_seconds)
            pool.wait_until_serving()
            # An attempt the scheduler gave up on may still be inside the job: let it end.
            settle = compressed.lease_seconds * 2 + 10
            job_id = settings.scheduler_job_id(job)
            wait_for(lambda: not live_claims(db, settings.runs_collection, job_id), timeout=settle)
        finally:
            pool.stop()
    counts = executions(log_path, settings.scheduler_job_id(job))
    for result in results:
        result.executions = counts.get(result.schedule_time, 0)
    facts = RunFacts(
        seed=options.seed,
        speedup=options.speedup,
        interval_seconds=options.interval_seconds,
        instances=options.instances,
        firestore_rtt_seconds=options.firestore_rtt_seconds,
        compressed=compressed,
        instance_crashes=pool.crashes,
        instance_restart_errors=pool.errors,
        attempts_ended=attempts_ended(log_path),
        delayed_connections=proxy.forwarded if proxy else 0,
        duration_seconds=time.monotonic() - began,
    )
    return build_report(settings, job, faults, results, facts)


# --- output -----------------------------------------------------------------------------------


def _printer(stream: TextIO | None) -> Any:
    def say(text: str) -> None:
        if stream is not None:
            print(text, file=stream, flush=True)

    return say


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


# --- CLI --------------------------------------------------------------------------------------


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a probability between 0 and 1")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults, rates = SimulationOptions(), FaultRates()
    parser = argparse.ArgumentParser(
        prog="python -m localrun.demo",
        description="Fire the dev stack's scheduled runs at the local function with at-least-once "
        "faults and check that every run executed exactly once.",
    )
    parser.add_argument("--runs", type=_positive_int, default=defaults.runs, help="scheduled runs to fire")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of the fault plan")
    parser.add_argument(
        "--speedup",
        type=_positive,
        default=defaults.speedup,
        help="clock compression: deadline, backoffs, time limit, lease and retention all run this "
        "much faster; the lease no shorter than a slow Firestore allows (default %(default)s)",
    )
    parser.add_argument(
        "--interval", type=float, default=defaults.interval_seconds, help="wall-clock seconds between runs"
    )
    parser.add_argument(
        "--instances",
        type=_positive_int,
        default=defaults.instances,
        help="function instances; a crashed or ended one is restarted while the others keep serving "
        "(1: the whole service refuses connections until it is back) (default %(default)s)",
    )
    parser.add_argument(
        "--firestore-rtt-ms",
        type=_non_negative,
        default=defaults.firestore_rtt_seconds * 1000,
        help="add this round-trip time to every Firestore call of the function, through a delaying "
        "proxy in front of the emulator, as if the database were far away (default %(default)g)",
    )
    parser.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml is read")
    parser.add_argument("--job", help="job name (default: the stack's first job)")
    for fault in Fault:
        parser.add_argument(
            f"--{fault.value.replace('_', '-')}-rate",
            type=_rate,
            default=rates.rate(fault),
            dest=f"{fault.value}_rate",
            help=f"probability per run of a {fault.value} fault (default %(default)s)",
        )
    parser.add_argument(
        "--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR, help="report and logs (default .demo/)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rates = FaultRates(**{f.value: getattr(args, f"{f.value}_rate") for f in Fault})
        rates.validate()
        settings = load_stack_settings(args.stack)
        job = _pick_job(settings, args.job)
        options = SimulationOptions(
            args.runs,
            args.seed,
            args.speedup,
            args.interval,
            args.instances,
            rates,
            firestore_rtt_seconds=args.firestore_rtt_ms / 1000,
        )
        problems = options.compressed(settings, job).problems(settings, job)
    except (ValueError, SettingsError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    for violation in timing.check_job_timing(settings.job_timing(job)):
        print(f"timing advisory ({violation.rule}): {violation.message}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(f"demo: {problem}", file=sys.stderr)
        print(
            f"demo: a run at speed-up x{args.speedup:g} could not pass; choose a smaller --speedup",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    out_dir: Path = args.output_dir
    out_dir.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    try:
        print("starting the Firestore emulator ...", file=sys.stderr, flush=True)
        with firestore_emulator(log_dir=out_dir) as host:
            report = simulate(
                settings,
                job,
                options,
                emulator_host=host,
                firestore_project=f"demo-{uuid.uuid4().hex[:8]}",
                log_dir=out_dir,
                progress=sys.stderr,
            )
    except (EmulatorError, FunctionServerError, WarmUpError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    report["total_seconds"] = round(time.monotonic() - started, 2)
    report_path = out_dir / "report.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(render_table(report))
    print(verdict_line(report))
    print(f"report: {_shown(report_path)} ({report['total_seconds']:g} s)")
    return EXIT_OK if report["ok"] else EXIT_NOT_EXACTLY_ONCE


def _pick_job(settings: StackSettings, name: str | None) -> JobSettings:
    """The job `--job` names as the stack config does (default: the stack's first job)."""
    return settings.jobs[0] if name is None else settings.job_named(name)


def _shown(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd()))
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
