"""Region b of a soak in two regions (`--regions 2`): its instances, its schedulers, and the
region fault that takes one region's schedulers down. One region's soak never builds it."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from google.cloud import firestore

from infra.settings.stack import StackSettings
from localrun.compression import CompressedTiming
from localrun.delivery import RunResult
from localrun.function_server import FunctionServer
from localrun.instances import InstancePool
from localrun.regions import LABELS, RegionSwitch, deliver_in_regions, delivery_offsets, merged
from localrun.scheduler import CompressedClock
from localrun.soak.plan import RunPlan, SoakFault
from localrun.soak.scheduler import Delivered, SoakScheduler

if TYPE_CHECKING:
    from localrun.soak.runner import SoakOptions


# How much later than region a region b delivers a run, at most (wall-clock seconds), and
# how much sooner when it comes first: the soak's runs are short.
SOAK_LATEST_OFFSET_SECONDS = 1.0
SOAK_EARLIEST_OFFSET_SECONDS = 0.3


class SecondRegion:
    """Region b of a soak in two regions: its instances (straight to the emulator, no fault
    of their own), one scheduler per job delivering every scheduled run plainly, and the
    region's fault, which takes one region's schedulers down for a few seconds."""

    def __init__(
        self,
        pool: InstancePool,
        schedulers: dict[str, SoakScheduler],
        switch: RegionSwitch,
        offsets: list[float],
        speedup: float,
    ) -> None:
        self.pool = pool
        self._schedulers = schedulers
        self._switch = switch
        self._offsets = offsets
        self._speedup = speedup
        self._lock = threading.Lock()
        self._regional: dict[tuple[str, int], tuple[dict[str, RunResult], float]] = {}
        self._outages: dict[int, bool] = {}  # scheduler run index -> whether the region went down
        self._timers: list[threading.Timer] = []

    def take_down(self, plan: RunPlan) -> None:
        """The run's region fault, from its firing on; it did not happen while the other
        region was down (one region always delivers)."""
        timer = self._switch.down_for(plan.variant, plan.seconds)
        with self._lock:
            self._outages[3 * plan.index] = timer is not None
            if timer is not None:
                self._timers.append(timer)

    def run(self, scheduler: SoakScheduler, index: int, delivered: Delivered) -> RunResult:
        """The run in both regions: region a's scheduler with the run's faults, region b's
        plainly (its body as a's retries send it), at the run's offset."""
        partner = self._schedulers[scheduler.job.name]
        plain = None
        if delivered.plan is not None:
            plain = dataclasses.replace(
                delivered.plan, primary=None, concurrent=False, duplicate=False, variant="", seconds=0.0
            )
        partner.register(index, dataclasses.replace(delivered, plan=plain))
        offset = self._offsets[delivered.run]
        results = deliver_in_regions(
            {LABELS[0]: scheduler, LABELS[1]: partner}, index, delivered.schedule_time, offset=offset
        )
        with self._lock:
            self._regional[(scheduler.job.name, index)] = (results, offset)
        return merged(results, offset, self._speedup)

    def each_run_merged(
        self, ended: list[tuple[SoakScheduler, RunResult]]
    ) -> list[tuple[SoakScheduler, RunResult]]:
        """Each run's one result from both regions, once every copy has been answered."""
        for scheduler in self._schedulers.values():
            scheduler.join_copies()
        for timer in self._timers:
            timer.join()
        out = []
        for scheduler, result in ended:
            both = self._regional.get((scheduler.job.name, result.index))
            out.append((scheduler, merged(both[0], both[1], self._speedup) if both else result))
        return out

    def add_outages(self, injected: dict[int, list[str]]) -> None:
        for index, happened in self._outages.items():
            kinds = [k for k in injected.get(index, []) if k != SoakFault.REGION_DOWN.value]
            injected[index] = [*kinds, SoakFault.REGION_DOWN.value] if happened else kinds


def second_region(
    settings: StackSettings,
    options: SoakOptions,
    *,
    env: dict[str, str],
    log_path: Path,
    stack: contextlib.ExitStack,
    db: firestore.Client,
    compressed: CompressedTiming,
    clock: CompressedClock,
    switch: RegionSwitch,
    schedulers_in: Callable[[str, InstancePool], dict[str, SoakScheduler]],
    alone_timeout_seconds: float,
) -> SecondRegion | None:
    """Region b, in a soak of two regions; its instances stop with the soak, as region a's do."""
    if options.regions < 2:
        return None
    log_path.unlink(missing_ok=True)
    servers = []
    for _ in range(options.instances):
        server = FunctionServer(env, log_path)
        servers.append(server)
        stack.callback(server.stop)
    pool = InstancePool(
        servers,
        db,
        settings.runs_collection,
        time_limit_seconds=compressed.time_limit_seconds,
        alone_timeout_seconds=alone_timeout_seconds,
    )
    schedulers = schedulers_in(LABELS[1], pool)
    offsets = delivery_offsets(
        options.runs,
        options.seed,
        latest=SOAK_LATEST_OFFSET_SECONDS,
        earliest=SOAK_EARLIEST_OFFSET_SECONDS,
    )
    return SecondRegion(pool, schedulers, switch, offsets, clock.speedup)
