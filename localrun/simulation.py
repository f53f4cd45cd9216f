"""One local run: serve the function, deliver a job's runs with faults, judge every run.

Kept apart from the command line (localrun/demo.py) so the chaos tests drive the same run
with their own stacks, jobs and fault plans.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from google.cloud import firestore

from infra.config.schema import FUNCTION_DIR
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from jobs.demo import run_demo_job
from localrun.compression import BUSY_ROUND_TRIP_SECONDS, CompressedTiming
from localrun.delivery import RunResult
from localrun.emulator import EMULATOR_HOST_ENV
from localrun.faults import JOB_FAULTS, FaultRates, RunFaults, plan_faults
from localrun.function_log import attempts_ended
from localrun.function_server import FunctionServer
from localrun.instances import InstancePool, live_claims, wait_for
from localrun.regions import (
    LABELS,
    RegionSwitch,
    delivery_offsets,
    demo_outage,
    region_names,
    run_all_in_regions,
)
from localrun.report import RunFacts, build_report, delivery_token, in_order_sent
from localrun.scheduler import CompressedClock, LocalScheduler, latest_fire_times
from localrun.tcp_proxy import TcpProxy, tcp_proxy
from localrun.verdicts import judge, ledger_records

# The handler whose body the slow, crash and fail faults speak (function/jobs/demo.py).
DEMO_JOB = f"{run_demo_job.__module__}:{run_demo_job.__name__}"


@dataclass(frozen=True)
class SimulationOptions:
    runs: int = 20
    seed: int = 7
    speedup: float = 20.0
    interval_seconds: float = 0.25  # wall clock between two fired runs
    instances: int = 3  # the stacks' maxInstances
    rates: FaultRates = field(default_factory=FaultRates)
    # Added to every Firestore round trip of the function (a delaying proxy in front of the
    # emulator), as if the database were far away; 0: none.
    firestore_rtt_seconds: float = 0.0
    # The slowest round trip a busy machine asks for (compression.slowest_round_trip_seconds).
    slowest_round_trip_seconds: float = BUSY_ROUND_TRIP_SECONDS
    # Regions every run is delivered in (localrun/regions.py): 1, or 2 with region a down for
    # a stretch of runs (regions.demo_outage).
    regions: int = 1

    def compressed(self, settings: StackSettings, job: JobSettings) -> CompressedTiming:
        """The function's timing for a run of `job`: the slowest round trip it must ride out
        is a busy machine's, plus the delay added on purpose."""
        round_trip = self.slowest_round_trip_seconds + self.firestore_rtt_seconds
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
    before: datetime | None = None,
    function_dir: Path = FUNCTION_DIR,
) -> dict[str, Any]:
    """Serve the function (from `function_dir`), deliver `options.runs` runs of `job`, judge
    each run; the JSON report. `plan` overrides the seeded fault plan (tests force a crash
    on a given run)."""
    began = time.monotonic()
    log_dir.mkdir(parents=True, exist_ok=True)
    names = region_names(settings.region, options.regions)
    # Region a's log is the one-region run's; region b's beside it. Each holds the function's
    # JSON lines only; what else its servers print goes beside it (server_output).
    logs = {
        label: log_dir / ("function.log" if label == LABELS[0] else f"function-{label}.log")
        for label in names
    }
    for path in logs.values():
        path.unlink(missing_ok=True)
        server_output(path).unlink(missing_ok=True)
    log_path = logs[LABELS[0]]
    say = printer(progress)

    handler = settings.handler_of(job)
    rates = options.rates
    if handler != DEMO_JOB and any(rates.rate(fault) for fault in JOB_FAULTS):
        rates = rates.without(JOB_FAULTS)
        say(
            f"{job.name!r} runs {handler}, not the demo job: injecting duplicates and lost answers only "
            f"({', '.join(fault.value for fault in JOB_FAULTS)} are carried out by the demo job's body)"
        )
    faults = list(plan) if plan is not None else plan_faults(options.runs, rates, options.seed)
    times = latest_fire_times(job.schedule, job.time_zone, before or datetime.now(UTC), len(faults))
    clock = CompressedClock(options.speedup)
    compressed = options.compressed(settings, job)
    two_regions = len(names) > 1
    outage = demo_outage(len(times)) if two_regions else None
    with contextlib.ExitStack() as stack:
        stack.enter_context(environment_variable(EMULATOR_HOST_ENV, emulator_host))
        proxy: TcpProxy | None = None
        if options.firestore_rtt_seconds:
            # The function reaches Firestore through a delaying proxy; the counts read it directly.
            delay = tcp_proxy(emulator_host, round_trip_seconds=options.firestore_rtt_seconds)
            proxy = stack.enter_context(delay)
        function_firestore = proxy.host if proxy else emulator_host
        env = compressed.function_env(
            settings,
            firestore_project=firestore_project,
            emulator_host=function_firestore,
            table_dir=Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="eos-job-table-"))),
        )
        db = firestore.Client(project=firestore_project)
        pools: dict[str, InstancePool] = {}
        for label, name in names.items():
            servers = [
                FunctionServer(
                    env, logs[label], source=function_dir / "main.py", stderr_path=server_output(logs[label])
                )
                for _ in range(options.instances)
            ]
            pools[label] = InstancePool(
                servers, db, settings.runs_collection, time_limit_seconds=compressed.time_limit_seconds
            )
            where = f" in {name} (region {label})" if two_regions else ""
            urls = ", ".join(server.url for server in servers)
            log, output = shown_path(logs[label]), shown_path(server_output(logs[label]))
            say(f"serving the function{where} on {urls} (log: {log}; the servers' own output: {output})")
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

        switch = RegionSwitch()
        schedulers = {
            label: LocalScheduler(
                settings,
                job,
                pools[label],
                clock=clock,
                compressed=compressed,
                # The planned faults are region a's: its pool's instances are the ones crashed.
                crash=pools[label].crash_when_inside if label == LABELS[0] else None,
                on_run_done=None if two_regions else on_run_done,
                region=label if two_regions else "",
                up=switch.up(label),
            )
            for label in names
        }
        try:
            for each in pools.values():
                each.start()
            for each in pools.values():
                each.warm_up(settings, job)
            say(
                f"firing {len(times)} runs of {job.name!r} ({job.schedule}, {job.time_zone}) "
                f"at speed-up x{options.speedup:g}, seed {options.seed}"
            )
            if two_regions:
                offsets = delivery_offsets(len(times), options.seed)
                if outage is not None:
                    down = outage.describe(names)
                    say(
                        f"every run delivered in {len(names)} regions; region {outage.region} "
                        f"({down['name']}) down from run {down['first_run']} to run {down['last_run']}"
                    )
                results = run_all_in_regions(
                    schedulers,
                    times,
                    faults,
                    switch=switch,
                    offsets=offsets,
                    interval_seconds=options.interval_seconds,
                    outage=outage,
                    on_run_done=on_run_done,
                )
            else:
                results = schedulers[LABELS[0]].run_all(
                    times, faults, interval_seconds=options.interval_seconds
                )
            for each in pools.values():
                each.wait_until_serving()
            # An attempt the scheduler gave up on may still be inside the job: let it end.
            settle = compressed.lease_seconds * 2 + 10
            job_id = settings.scheduler_job_id(job)
            wait_for(lambda: not live_claims(db, settings.runs_collection, job_id), timeout=settle)
        finally:
            for each in pools.values():
                each.stop()
        judge(
            results,
            logs if two_regions else log_path,
            job_id,
            ledger_records(db, settings.runs_collection, job_id),
        )
    facts = RunFacts(
        seed=options.seed,
        speedup=options.speedup,
        interval_seconds=options.interval_seconds,
        instances=options.instances,
        firestore_rtt_seconds=options.firestore_rtt_seconds,
        compressed=compressed,
        instance_crashes=sum(each.crashes for each in pools.values()),
        instance_restart_errors=[error for each in pools.values() for error in each.errors],
        attempts_ended=sum(attempts_ended(path) for path in logs.values()),
        delayed_connections=proxy.forwarded if proxy else 0,
        duration_seconds=time.monotonic() - began,
        emulator_host=emulator_host,
        firestore_project=firestore_project,
        regions=names if two_regions else {},
        outage=outage.describe(names) if outage is not None else None,
    )
    return build_report(settings, job, faults, results, facts)


# --- output -----------------------------------------------------------------------------------


def server_output(log_path: Path) -> Path:
    """Beside a function log, the file of what its servers print besides the function's JSON
    lines (the framework's and gunicorn's own, e.g. a worker the watchdog ended, and
    tracebacks): `function.log` stays one JSON object per line, for `jq` and for the judge."""
    return log_path.with_name(f"{log_path.stem}.stderr.log")


def printer(stream: TextIO | None) -> Callable[[str], None]:
    """A progress printer on `stream`, or one that says nothing."""

    def say(text: str) -> None:
        if stream is not None:
            print(text, file=stream, flush=True)

    return say


@contextlib.contextmanager
def environment_variable(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` in this process's environment while the block runs."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def shown_path(path: Path) -> str:
    """`path` as a person typed it: relative to where the demo runs, when inside it."""
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd()))
    return str(path)
