"""`make demo`: watch exactly-once hold under at-least-once delivery, before deploying anything.

Starts the Firestore emulator and the function (Functions Framework, loopback), fires the dev
stack's upcoming scheduled runs through the local Cloud Scheduler with seeded faults, then
counts what actually executed in Firestore. The exit code is the verdict, so CI can run it.

Exit codes: 0 every run executed exactly once; 1 some run executed twice or never;
2 the demo could not run (bad option, bad stack config, emulator or server failed to start).
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

from infra import timing
from infra.settings import REPO_ROOT, JobSettings, SettingsError, StackSettings, load_stack_settings
from localrun.delivery import RunResult
from localrun.emulator import EMULATOR_HOST_ENV, EmulatorError, firestore_emulator
from localrun.faults import Fault, FaultRates, RunFaults, fault_counts, plan_faults
from localrun.function_server import FunctionServer, FunctionServerError
from localrun.instances import InstancePool, count_executions, live_claims, wait_for
from localrun.scheduler import (
    CompressedClock,
    LocalScheduler,
    compressed_function_env,
    fire_times,
)

DEFAULT_OUTPUT_DIR = REPO_ROOT / ".demo"
EXIT_OK, EXIT_NOT_EXACTLY_ONCE, EXIT_CANNOT_RUN = 0, 1, 2


@dataclass(frozen=True)
class SimulationOptions:
    runs: int = 20
    seed: int = 7
    speedup: float = 20.0
    interval_seconds: float = 0.25  # wall clock between two fired runs
    instances: int = 3  # the dev stack's maxInstances
    rates: FaultRates = field(default_factory=FaultRates)


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
) -> dict[str, Any]:
    """Serve the function, deliver `options.runs` runs of `job`, count executions; the JSON
    report. `plan` overrides the seeded fault plan (tests force a crash on a given run)."""
    began = time.monotonic()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "function.log"
    log_path.unlink(missing_ok=True)
    say = _printer(progress)

    faults = list(plan) if plan is not None else plan_faults(options.runs, options.rates, options.seed)
    times = fire_times(job.schedule, job.time_zone, start or datetime.now(UTC), len(faults))
    clock = CompressedClock(options.speedup)
    env = compressed_function_env(
        settings, options.speedup, firestore_project=firestore_project, emulator_host=emulator_host
    )
    with _environment(EMULATOR_HOST_ENV, emulator_host):
        db = firestore.Client(project=firestore_project)
        servers = [FunctionServer(env, log_path) for _ in range(options.instances)]
        pool = InstancePool(servers, db, settings.runs_collection)
        say(f"serving the function on {', '.join(s.url for s in servers)} (log: {_shown(log_path)})")
        pool.start()
        pool.warm_up(settings, job)
        done = 0
        lock = threading.Lock()

        def on_run_done(result: RunResult) -> None:
            nonlocal done
            with lock:
                done += 1
                codes = " ".join(_delivery_token(d) for d in _ordered(result))
                state = "acknowledged" if result.acknowledged else "retries exhausted"
                run = f"run {result.index + 1:>3} {result.schedule_time}"
                say(f"  [{done:>3}/{len(times)}] {run}: {codes} ({state})")

        scheduler = LocalScheduler(
            settings, job, pool.pick, clock=clock, crash=pool.crash_when_inside, on_run_done=on_run_done
        )
        say(
            f"firing {len(times)} runs of {job.name!r} ({job.schedule}, {job.time_zone}) "
            f"at speed-up x{options.speedup:g}, seed {options.seed}"
        )
        try:
            results = scheduler.run_all(times, faults, interval_seconds=options.interval_seconds)
            pool.wait_until_serving()
            # An attempt the scheduler gave up on may still be inside the job: let it end.
            settle = clock.real(settings.lease_seconds) * 2 + 10
            job_id = settings.scheduler_job_id(job)
            wait_for(lambda: not live_claims(db, settings.runs_collection, job_id), timeout=settle)
            counts = count_executions(db, job_id)
        finally:
            pool.stop()
    for result in results:
        result.executions = counts.get(result.schedule_time, 0)
    return _report(settings, job, options, faults, results, pool, time.monotonic() - began)


def _report(
    settings: StackSettings,
    job: JobSettings,
    options: SimulationOptions,
    plan: Sequence[RunFaults],
    results: Sequence[RunResult],
    pool: InstancePool,
    duration: float,
) -> dict[str, Any]:
    injected = dict.fromkeys((fault.value for fault in Fault), 0)
    for result in results:
        for fault in {f for d in result.deliveries for f in d.faults}:
            injected[fault] += 1
    duplicates = sum(r.verdict == "duplicate" for r in results)
    lost = sum(r.verdict == "lost" for r in results)
    job_timing = settings.job_timing(job)
    retry_waits = [
        later - earlier
        for earlier, later in zip(
            [0.0, *timing.retry_arrivals_if_every_attempt_fails_instantly(job.retry)],
            timing.retry_arrivals_if_every_attempt_fails_instantly(job.retry),
            strict=False,
        )
    ]
    return {
        "ok": duplicates == 0 and lost == 0,
        "job": job.name,
        "schedule": job.schedule,
        "time_zone": job.time_zone,
        "seed": options.seed,
        "speedup": options.speedup,
        "interval_seconds": options.interval_seconds,
        "runs": len(results),
        "exactly_once": sum(r.verdict == "exactly-once" for r in results),
        "duplicate": duplicates,
        "lost": lost,
        "retries_exhausted": sum(r.retries_exhausted for r in results),
        "deliveries": sum(len(r.deliveries) for r in results),
        "faults_planned": fault_counts(plan),
        # Runs on which each fault really happened (a crash can be pre-empted by another one).
        "faults_injected": injected,
        "instances": options.instances,
        "instance_crashes": pool.crashes,
        "instance_restart_errors": pool.errors,
        "duration_seconds": round(duration, 2),
        "timing": {
            "simulated": {
                "attempt_deadline_seconds": job.attempt_deadline_seconds,
                "lease_seconds": settings.lease_seconds,
                "retention_seconds": settings.retention_seconds,
                "retry_waits_seconds": retry_waits,
            },
            "wall_clock": {
                "attempt_deadline_seconds": job.attempt_deadline_seconds / options.speedup,
                "lease_seconds": settings.lease_seconds / options.speedup,
                "retention_seconds": settings.retention_seconds / options.speedup,
                "retry_waits_seconds": [w / options.speedup for w in retry_waits],
            },
            "violations": [
                {"rule": v.rule, "advisory": v.advisory, "message": v.message}
                for v in timing.check_job_timing(job_timing)
            ],
        },
        "results": [r.to_json() for r in results],
    }


# --- output -----------------------------------------------------------------------------------


def _ordered(result: RunResult) -> list[Any]:
    return sorted(result.deliveries, key=lambda d: (d.sent_at_s, d.attempt, d.copy))


def _delivery_token(delivery: Any) -> str:
    if delivery.outcome == "timeout":
        token = "T/O"
    elif delivery.outcome == "dropped":
        token = "DROP"
    else:
        token = str(delivery.status) + ("!" if delivery.outcome.startswith("lost_ack") else "")
    return f"[{token}]" if delivery.copy else token


def render_table(report: dict[str, Any]) -> str:
    rows = [("#", "schedule time (UTC)", "faults", "deliv", "status codes", "execs", "outcome")]
    for run in report["results"]:
        deliveries = sorted(run["deliveries"], key=lambda d: (d["sent_at_s"], d["attempt"], d["copy"]))
        tokens = " ".join(_delivery_token(_Row(d)) for d in deliveries)
        outcome = run["verdict"] + ("; scheduler gave up" if run["retries_exhausted"] else "")
        shown = {fault for d in deliveries for fault in d["faults"]}
        rows.append(
            (
                str(run["index"] + 1),
                run["schedule_time"],
                ",".join(f if f in shown else f"({f})" for f in run["faults"]) or "-",
                str(len(deliveries)),
                tokens,
                str(run["executions"]),
                outcome,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(
        "status codes in order sent: T/O = no answer within the attempt deadline, "
        "DROP = connection cut (crash/restart), 200! = answer lost on the way back, "
        "[..] = injected duplicate copy, (fault) = planned but pre-empted"
    )
    return "\n".join(line.rstrip() for line in lines)


class _Row:
    """A report delivery (dict) seen through the attribute names of delivery.Delivery."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.outcome: str = data["outcome"]
        self.status: int | None = data["status"]
        self.copy: bool = data["copy"]


def verdict_line(report: dict[str, Any]) -> str:
    injected = ", ".join(f"{name} {count}" for name, count in report["faults_injected"].items())
    if report["ok"]:
        return (
            f"PASS: {report['exactly_once']}/{report['runs']} runs executed exactly once "
            f"({report['deliveries']} deliveries; faults injected: {injected})"
        )
    return (
        f"FAIL: {report['duplicate']} run(s) executed more than once, {report['lost']} never "
        f"(of {report['runs']}; faults injected: {injected})"
    )


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
        help="clock compression: deadline, backoffs, lease and retention all run this much faster",
    )
    parser.add_argument(
        "--interval", type=float, default=defaults.interval_seconds, help="wall-clock seconds between runs"
    )
    parser.add_argument(
        "--instances",
        type=_positive_int,
        default=defaults.instances,
        help="function instances; a crash takes one down with its requests, the others keep serving "
        "(1: the whole service refuses connections until it is back) (default %(default)s)",
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
    except (ValueError, SettingsError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    options = SimulationOptions(args.runs, args.seed, args.speedup, args.interval, args.instances, rates)
    out_dir: Path = args.output_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    for violation in timing.check_job_timing(settings.job_timing(job)):
        kind = "advisory" if violation.advisory else "VIOLATION"
        print(f"timing {kind} ({violation.rule}): {violation.message}", file=sys.stderr)

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
    except (EmulatorError, FunctionServerError) as error:
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
