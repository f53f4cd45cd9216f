"""One soak: the emulator's function instances, every planned run delivered with its faults,
the count of what each came to.

The instances: `instances` in rotation, each reaching Firestore through a TCP proxy of its
own (the Firestore faults of one attempt land on its instance only), and one instance per
clock offset (libfaketime), which only the clock-skew fault's attempts are sent to.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

from google.cloud import firestore

from exactly_once.delivery.scheduler_request import format_rfc3339
from infra.settings.stack import StackSettings
from localrun.compression import BUSY_ROUND_TRIP_SECONDS, CompressedTiming
from localrun.delivery import RunResult
from localrun.emulator import EMULATOR_HOST_ENV
from localrun.function_server import FunctionServer
from localrun.instances import InstancePool, live_claims, wait_for
from localrun.regions import LABELS, RegionSwitch, region_names
from localrun.scheduler import CompressedClock, fire_times
from localrun.simulation import environment_variable, printer
from localrun.soak import checker
from localrun.soak.injector import ExecutionWatch, Injector
from localrun.soak.plan import RunPlan, SoakFault
from localrun.soak.scheduler import AT_FORCED_TIME, FORCED, SCHEDULED, Delivered, SoakScheduler
from localrun.soak.second_region import SecondRegion, second_region
from localrun.soak.served import soak_record
from localrun.tcp_proxy import TcpProxy
from policy.scheduler_guardrails.rules.timing import rules as timing

SERVED_DIR = Path(soak_record.__file__).resolve().parent
SOAK_JOB_HANDLER = "soak_job:run_soak_job"
# The scheduled runs' fire times start here: in the past, so none is ahead of Firestore's
# clock (a delivery ahead of it is a forced run), and the same on every replay.
FIRST_FIRE_TIME = datetime(2020, 1, 1, tzinfo=UTC)
# A forced run's ScheduleTime is the next whole minute at least this far ahead: every retry of
# the forced delivery (the last within 30 s at the soak's speed-up) is sent while it is still
# ahead of Firestore's clock.
FORCED_LEAD_SECONDS = 30.0
# The scheduled delivery of a forced run's ScheduleTime comes this long after it, as
# Cloud Scheduler's does.
AT_FORCED_TIME_DELAY_SECONDS = 1.0
SKEW_OFFSETS = ("+120s", "-120s")
# The first runs are fired slower: a fresh emulator and fresh instances answer their first
# burst slowly, and a completion Firestore answers only after the lease has ended fails after
# the job ran (store_error), a run a retry then executes again (docs/jobs.md). Seen at full
# speed from the start: 6 runs in 1,000, all among the first hundred.
RAMP_RUNS = 200
RAMP_EXTRA_INTERVAL_SECONDS = 0.1
# An attempt sent alone waits for an instance to come free: on a busy machine, behind many
# others that restart instances. A wait this long is the harness stuck, reported as such.
ALONE_TIMEOUT_SECONDS = 1800.0


@dataclass(frozen=True)
class SoakOptions:
    runs: int = 1000
    seed: int = 1
    only: int | None = None  # replay this run alone
    instances: int = 10
    in_flight: int = 64  # runs under way at once, at most
    interval_seconds: float = 0.02  # between two runs fired
    speedup: float = 20.0
    # The slowest Firestore round trip to ride out (compression.slowest_round_trip_seconds).
    slowest_round_trip_seconds: float = BUSY_ROUND_TRIP_SECONDS
    forced: bool = True
    # Directories put first on the instances' PYTHONPATH (a test's sitecustomize).
    extra_pythonpath: tuple[Path, ...] = ()
    # Regions every scheduled run is delivered in (localrun/regions.py): with 2, a second
    # scheduler per job delivers it too, plainly, to instances of its own.
    regions: int = 1


@dataclass
class SoakOutcome:
    judged: list[checker.Judged]
    stray: list[str]
    injected: dict[int, list[str]]
    deliveries: int
    instance_crashes: int
    instance_freezes: int
    restart_errors: list[str]
    duration_seconds: float
    timing: dict[str, float] = field(default_factory=dict)


def soak(
    settings: StackSettings,
    plans: Sequence[RunPlan],
    options: SoakOptions,
    *,
    emulator_host: str,
    firestore_project: str,
    out_dir: Path,
    progress: TextIO | None = None,
) -> SoakOutcome:
    began = time.monotonic()
    say = printer(progress)
    # Absolute: the instances run in function/, and write the execution file from there.
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "function.log"
    executions_path = out_dir / "executions.jsonl"
    scheduler_log = out_dir / "scheduler.jsonl"
    for path in (log_path, executions_path, scheduler_log):
        path.unlink(missing_ok=True)
    jobs = settings.jobs
    compressed = CompressedTiming.of(
        settings, options.speedup, round_trip_seconds=options.slowest_round_trip_seconds, job=jobs[0]
    )
    clock = CompressedClock(options.speedup)
    selected = [plans[options.only]] if options.only is not None else list(plans)
    times = {
        job.name: fire_times(job.schedule, job.time_zone, FIRST_FIRE_TIME, math.ceil(len(plans) / len(jobs)))
        for job in jobs
    }

    with contextlib.ExitStack() as stack:
        stack.enter_context(environment_variable(EMULATOR_HOST_ENV, emulator_host))
        db = firestore.Client(project=firestore_project)
        base_env = compressed.function_env(
            settings,
            firestore_project=firestore_project,
            emulator_host=emulator_host,
            table_dir=Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="eos-job-table-"))),
            handlers=False,
        )
        pythonpath = [str(p) for p in options.extra_pythonpath] + [str(SERVED_DIR)]
        base_env.update(
            JOB_HANDLER=SOAK_JOB_HANDLER,
            PYTHONPATH=os.pathsep.join(pythonpath),
            **{soak_record.EXECUTIONS_FILE_ENV: str(executions_path)},
        )
        proxies: list[tuple[FunctionServer, TcpProxy]] = []
        servers = []
        for _ in range(options.instances):
            proxy = stack.enter_context(contextlib.closing(TcpProxy(emulator_host)))
            server = FunctionServer({**base_env, EMULATOR_HOST_ENV: proxy.host}, log_path)
            proxies.append((server, proxy))
            servers.append(server)
            stack.callback(server.stop)  # stopped even when the soak is interrupted
        pool = InstancePool(
            servers,
            db,
            settings.runs_collection,
            time_limit_seconds=compressed.time_limit_seconds,
            alone_timeout_seconds=ALONE_TIMEOUT_SECONDS,
        )
        faketime = shutil.which("faketime")
        skewed_servers = {
            offset: FunctionServer(base_env, log_path, launcher=(faketime, "-f", offset) if faketime else ())
            for offset in SKEW_OFFSETS
        }
        for server in skewed_servers.values():
            stack.callback(server.stop)
        skewed = {
            offset: InstancePool(
                [server], db, settings.runs_collection, time_limit_seconds=compressed.time_limit_seconds
            )
            for offset, server in skewed_servers.items()
        }
        if faketime is None:
            say(
                "warning: faketime is not installed: the clock-skew fault's instances run on "
                "this machine's clock"
            )
        watch = ExecutionWatch(executions_path)
        stack.callback(watch.close)
        injector = Injector(
            pool,
            functools.partial(_proxy_of, proxies),
            db,
            settings.runs_collection,
            watch,
            project=settings.project,
            location=settings.run_location,
        )
        # A region goes down only once the other has been up for as long as a run's retries
        # can last, plus an attempt: the runs it delivered alone are done by then.
        retries = timing.retry_arrivals_if_every_attempt_fails_instantly(jobs[0].retry)
        deadline = compressed.attempt_deadline_seconds(settings, jobs[0])
        switch = RegionSwitch(guard_seconds=clock.real(retries[-1] if retries else 0.0) + deadline)
        names = region_names(settings.region, options.regions)
        two_regions = len(names) > 1

        def schedulers_in(label: str, serving: InstancePool) -> dict[str, SoakScheduler]:
            """A scheduler per job in region `label`, delivering to its region's instances."""
            return {
                job.name: SoakScheduler(
                    settings,
                    job,
                    serving,
                    clock=clock,
                    compressed=compressed,
                    injector=injector,
                    skewed=skewed,
                    region=label if two_regions else "",
                    up=switch.up(label),
                )
                for job in jobs
            }

        schedulers = schedulers_in(LABELS[0], pool)
        regional = second_region(
            settings,
            options,
            env=base_env,
            log_path=out_dir / f"function-{LABELS[1]}.log",
            stack=stack,
            db=db,
            compressed=compressed,
            clock=clock,
            switch=switch,
            schedulers_in=schedulers_in,
            alone_timeout_seconds=ALONE_TIMEOUT_SECONDS,
        )
        pools = [pool, *skewed.values(), *([regional.pool] if regional else [])]
        second = f", and {options.instances} in region {names[LABELS[1]]}" if regional else ""
        say(
            f"serving the function on {len(servers)} instances and {len(skewed)} clock-skewed ones{second} "
            f"(wall clock: lease {compressed.lease_seconds:g}s, "
            f"time limit {compressed.time_limit_seconds:g}s)"
        )
        counter = _Progress(say, len(selected) + sum(p.primary is SoakFault.FORCED for p in selected) * 2)
        ended: list[tuple[SoakScheduler, RunResult]] = []
        ended_lock = threading.Lock()

        def finished(scheduler: SoakScheduler, result: RunResult) -> None:
            with ended_lock:
                ended.append((scheduler, result))
            counter.one(result)

        finished_cleanly = False
        try:
            for instance_pool in pools:
                instance_pool.start()
            for instance_pool in pools:
                instance_pool.warm_up(settings, jobs[0])
            where = f" in regions {' and '.join(names.values())}" if regional else ""
            say(f"firing {len(selected)} runs of {len(jobs)} jobs{where}, seed {options.seed}")
            _fire(
                selected,
                jobs_named=[job.name for job in jobs],
                times=times,
                schedulers=schedulers,
                options=options,
                finished=finished,
                regional=regional,
            )
            for scheduler in schedulers.values():
                scheduler.join_copies()
            if regional:
                ended = regional.each_run_merged(ended)
            # Written once every copy has been answered: a copy outlives its run's last attempt.
            _write_log(scheduler_log, ended)
            pool.wait_until_serving()
            settle = compressed.lease_seconds * 2 + 10
            job_ids = [scheduler.job_id for scheduler in schedulers.values()]
            wait_for(
                lambda: not any(live_claims(db, settings.runs_collection, job_id) for job_id in job_ids),
                timeout=settle,
                interval=0.5,
            )
            finished_cleanly = True
        finally:
            for instance_pool in pools:
                instance_pool.stop(wait=finished_cleanly)
        expected = [f"r{plan.index}" for plan in selected]
        judged, stray = checker.check(executions_path, scheduler_log, db, settings.runs_collection, expected)
    injected: dict[int, list[str]] = {}
    for scheduler in schedulers.values():
        injected.update(scheduler.injected)
    if regional:
        regional.add_outages(injected)
    return SoakOutcome(
        judged=judged,
        stray=stray,
        injected=injected,
        deliveries=sum(j.deliveries for j in judged),
        instance_crashes=pool.crashes,
        instance_freezes=pool.freezes,
        restart_errors=list(pool.errors),
        duration_seconds=time.monotonic() - began,
        timing={
            "lease_seconds": compressed.lease_seconds,
            "time_limit_seconds": compressed.time_limit_seconds,
            "attempt_deadline_seconds": compressed.attempt_deadline_seconds(settings, jobs[0]),
        },
    )


def _where(error: BaseException) -> str:
    """The error and the line of the harness that raised it: an AssertionError's repr alone
    says nothing of which check failed."""
    frames = traceback.extract_tb(error.__traceback__)
    origin = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{error!r}{origin}"


def _proxy_of(proxies: Sequence[tuple[FunctionServer, TcpProxy]], url: str) -> TcpProxy:
    """The proxy of the instance serving at `url` now. Matched by the instance's URL at the
    time of the attempt, never by the one it was given when created: an instance whose port
    another process took while it started serves on another port (localrun/port_holder.py),
    and a fault looked up by its first URL found no proxy and failed its run undelivered."""
    for server, proxy in proxies:
        if server.url == url:
            return proxy
    raise LookupError(f"no instance of the soak serves at {url}: {[server.url for server, _ in proxies]}")


def _write_log(path: Path, ended: Sequence[tuple[SoakScheduler, RunResult]]) -> None:
    """The scheduler's log: every run it delivered, its deliveries, whether it gave up."""
    with path.open("w", encoding="utf-8") as log:
        for scheduler, result in ended:
            delivered = scheduler.delivered(result.index)
            entry = {
                "tag": delivered.tag,
                "run": delivered.run,
                "role": delivered.role,
                "job_id": scheduler.job_id,
                "schedule_time": result.schedule_time,
                "acknowledged": result.acknowledged,
                "faults": result.faults,
                "deliveries": [d.__dict__ for d in result.deliveries],
                "harness_error": result.reason,
            }
            log.write(json.dumps(entry, default=str) + "\n")


def _fire(
    selected: Sequence[RunPlan],
    *,
    jobs_named: Sequence[str],
    times: dict[str, list[datetime]],
    schedulers: dict[str, SoakScheduler],
    options: SoakOptions,
    finished: Callable[[SoakScheduler, RunResult], None],
    regional: SecondRegion | None = None,
) -> None:
    """Fire the runs in plan order, at most `in_flight` under way at once; a forced run's two
    extra deliveries beside its run, the second once its ScheduleTime has passed. In two
    regions, every run but a forced one (sent by hand, in one region) is delivered in both."""
    slots = threading.BoundedSemaphore(options.in_flight)
    threads: list[threading.Thread] = []
    next_forced: dict[str, datetime] = {}

    def start(scheduler: SoakScheduler, index: int, delivered: Delivered, at: float = 0.0) -> None:
        scheduler.register(index, delivered)

        def go() -> None:
            if at:
                time.sleep(max(0.0, at - time.time()))
            with slots:
                try:
                    if regional is not None and delivered.role != FORCED:
                        result = regional.run(scheduler, index, delivered)
                    else:
                        result = scheduler.run(index, delivered.schedule_time)
                except Exception as error:  # the harness failed the run: never a silent gap
                    result = RunResult(index, scheduler.job.name, format_rfc3339(delivered.schedule_time), [])
                    result.reason = f"the soak could not deliver it: {_where(error)}"
                finished(scheduler, result)

        thread = threading.Thread(target=go, name=f"run-{index}", daemon=True)
        threads.append(thread)
        if not at:
            slots.acquire()  # back-pressure: fire no faster than runs end
            slots.release()
        thread.start()

    # Forced runs first: their second delivery waits for their ScheduleTime, up to a minute
    # and a half ahead, which the rest of the soak spends firing the scheduled runs.
    for plan in selected:
        if plan.primary is SoakFault.FORCED and options.forced:
            name = jobs_named[plan.index % len(jobs_named)]
            scheduler = schedulers[name]
            ahead = datetime.now(UTC) + timedelta(seconds=FORCED_LEAD_SECONDS)
            forced_at = ahead.replace(second=0, microsecond=0) + timedelta(minutes=1)
            if name in next_forced:
                forced_at = max(forced_at, next_forced[name])
            next_forced[name] = forced_at + timedelta(minutes=1)
            forced = Delivered(f"r{plan.index}-forced", plan.index, FORCED, forced_at, None)
            start(scheduler, 3 * plan.index + 1, forced)
            due = forced_at.timestamp() + AT_FORCED_TIME_DELAY_SECONDS
            at_time = Delivered(f"r{plan.index}-at-forced-time", plan.index, AT_FORCED_TIME, forced_at, None)
            start(scheduler, 3 * plan.index + 2, at_time, at=due)
    for fired, plan in enumerate(selected):
        name = jobs_named[plan.index % len(jobs_named)]
        when = times[name][plan.index // len(jobs_named)]
        if regional is not None and plan.primary is SoakFault.REGION_DOWN:
            regional.take_down(plan)
        start(
            schedulers[name], 3 * plan.index, Delivered(f"r{plan.index}", plan.index, SCHEDULED, when, plan)
        )
        ramping = fired < RAMP_RUNS
        time.sleep(options.interval_seconds + (RAMP_EXTRA_INTERVAL_SECONDS if ramping else 0.0))
    for thread in threads:
        thread.join()


class _Progress:
    def __init__(self, say: Callable[[str], None], total: int) -> None:
        self._say = say
        self._total = total
        self._done = 0
        self._lock = threading.Lock()
        self._began = time.monotonic()
        self._every = max(1, total // 50)

    def one(self, result: RunResult) -> None:
        with self._lock:
            self._done += 1
            if self._done % self._every == 0 or self._done == self._total:
                rate = self._done / max(time.monotonic() - self._began, 1e-9)
                self._say(f"  [{self._done}/{self._total}] runs delivered ({rate:.1f}/s)")
