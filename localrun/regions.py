"""One job, two regions: every run delivered by two regional schedulers, executed once.

Cloud Scheduler is regional, so a stack that keeps its jobs through a region's outage declares
each job in two regions. Both regions' jobs send the same headers (X-Job-Location names the
stack's primary region in both), so both deliveries of a run carry one run id, and the one
ledger both regions' functions write to executes it once. Locally, each region is a scheduler
of its own (its own retry loop, as Cloud Scheduler's) delivering to a function of its own;
one emulator database holds the ledger.

The second region's delivery of a run comes a little after the first region's, and sometimes
before: the two regions' schedulers fire on their own clocks. A region may be down for a
stretch, sending nothing (neither first attempts nor retries), and the other region then
delivers alone.

Locally the regions are named `<region>` and `<region>-b`; in reports they are `a` and `b`.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from localrun.delivery import RunResult
from localrun.faults import NO_FAULTS, RunFaults
from localrun.scheduler import LocalScheduler

LABELS = ("a", "b")
MAX_REGIONS = len(LABELS)
# How much later than region a region b's first delivery of a run comes (wall-clock seconds),
# and how much earlier when it comes first (one run in EARLIER_SHARE).
LATEST_OFFSET_SECONDS = 3.0
EARLIEST_OFFSET_SECONDS = 0.5
EARLIER_SHARE = 0.2


def region_names(primary: str, count: int) -> dict[str, str]:
    """Label -> local region name: the stack's region, then `<region>-b`."""
    if not 1 <= count <= MAX_REGIONS:
        raise ValueError(f"--regions must be 1 or {MAX_REGIONS}, got {count}")
    return dict(zip(LABELS, (primary, f"{primary}-b"), strict=True)) if count == 2 else {LABELS[0]: primary}


def delivery_offsets(
    runs: int,
    seed: int,
    *,
    latest: float = LATEST_OFFSET_SECONDS,
    earliest: float = EARLIEST_OFFSET_SECONDS,
) -> list[float]:
    """Per run, how many wall-clock seconds after region a region b first delivers it
    (negative: before), reproducible from `seed`."""
    rng = random.Random(f"regions:{seed}")
    return [
        -rng.uniform(0.0, earliest) if rng.random() < EARLIER_SHARE else rng.uniform(0.05, latest)
        for _ in range(runs)
    ]


@dataclass(frozen=True)
class Outage:
    """A region down from the firing of run `first_run` until the firing of the run
    `runs` later (0-based run indices)."""

    region: str  # a label
    first_run: int
    runs: int

    @property
    def last_run(self) -> int:
        return self.first_run + self.runs - 1

    def describe(self, names: Mapping[str, str]) -> dict[str, object]:
        return {
            "region": self.region,
            "name": names.get(self.region, self.region),
            "first_run": self.first_run + 1,
            "last_run": self.last_run + 1,
        }


def demo_outage(runs: int) -> Outage | None:
    """The demo's outage: region a (the stack's own region, the one a fork deploys first)
    down for about a quarter of the runs, from a third of the way in; none below 3 runs,
    which leave no stretch with runs on both sides."""
    if runs < 3:
        return None
    first = runs // 3
    return Outage(LABELS[0], first, min(max(2, runs // 4), runs - first - 1))


class RegionSwitch:
    """Which regions are up. At most one region is down at a time: with both down, nothing
    could deliver a run, and no ledger can execute a run nobody sends. And a region is taken
    down only once the other has been back up for `guard_seconds`: the runs the other
    delivered alone need their own region's retries to finish (a first attempt turned away
    by a lease, or failed, is retried), and a region's delivery of a run comes up to an offset
    after the other's, so a handover without that pause leaves runs that neither region
    sends, which is two outages, not one."""

    def __init__(
        self, guard_seconds: float = 0.0, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._down: str | None = None
        self._guard = guard_seconds
        self._monotonic = monotonic
        self._back_up: tuple[str, float] | None = None  # the region last brought up, and when
        self.outages = 0

    def up(self, region: str) -> Callable[[], bool]:
        """Whether `region` is up, as a probe a scheduler asks before every attempt."""
        return lambda: self._down != region

    def take_down(self, region: str) -> bool:
        """Take `region` down; False (nothing changes) while another region is down or has
        not been back up for the guard's length."""
        with self._lock:
            if self._down not in (None, region):
                return False
            if self._back_up is not None:
                other, since = self._back_up
                if other != region and self._monotonic() - since < self._guard:
                    return False
            if self._down is None:
                self.outages += 1
            self._down = region
            return True

    def bring_up(self, region: str) -> None:
        with self._lock:
            if self._down == region:
                self._down = None
                self._back_up = (region, self._monotonic())

    def down_for(self, region: str, seconds: float) -> threading.Timer | None:
        """Take `region` down for `seconds`, then up again; None when it could not be taken
        down (another region is, or was a moment ago)."""
        if not self.take_down(region):
            return None
        timer = threading.Timer(seconds, self.bring_up, args=(region,))
        timer.daemon = True
        timer.start()
        return timer


def deliver_in_regions(
    schedulers: Mapping[str, LocalScheduler],
    index: int,
    schedule_time: datetime,
    *,
    offset: float,
    faults: RunFaults = NO_FAULTS,
) -> dict[str, RunResult]:
    """Every region's delivery of one run, region b `offset` seconds after region a (before
    it, when negative); the faults on region a's first attempt. Each region's result, by label
    (a duplicate copy may still add to it: `merged` once the copies are joined)."""
    delays = region_delays(offset)
    results: dict[str, RunResult] = {}
    errors: list[BaseException] = []

    def deliver(label: str, scheduler: LocalScheduler) -> None:
        try:
            time.sleep(delays[label])
            results[label] = scheduler.run(index, schedule_time, faults if label == LABELS[0] else NO_FAULTS)
        except BaseException as error:  # re-raised in the caller's thread
            errors.append(error)

    threads = [
        threading.Thread(target=deliver, args=(label, scheduler), name=f"run-{index}-{label}")
        for label, scheduler in schedulers.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def region_delays(offset: float) -> dict[str, float]:
    """How long after a run is fired each region first delivers it (wall-clock seconds)."""
    return {LABELS[0]: max(0.0, -offset), LABELS[1]: max(0.0, offset)}


def merged(results: Mapping[str, RunResult], offset: float, speedup: float) -> RunResult:
    """One run's results from every region as one: region a's planned faults, every delivery
    (its times counted from the run's firing, in simulated seconds), acknowledged when any
    region's scheduler heard a 2xx."""
    delays = region_delays(offset)
    head = next(iter(results.values()))
    run = RunResult(head.index, head.job, head.schedule_time, list(results.get(LABELS[0], head).faults))
    for label, result in results.items():
        shift = delays[label] * speedup
        for delivery in list(result.deliveries):
            answered = None if delivery.answered_at_s is None else round(delivery.answered_at_s + shift, 3)
            run.deliveries.append(
                dataclasses.replace(
                    delivery, sent_at_s=round(delivery.sent_at_s + shift, 3), answered_at_s=answered
                )
            )
        run.acknowledged = run.acknowledged or result.acknowledged
        run.reason = run.reason or result.reason
    return run


def run_all_in_regions(
    schedulers: Mapping[str, LocalScheduler],
    schedule_times: Sequence[datetime],
    plan: Sequence[RunFaults],
    *,
    switch: RegionSwitch,
    offsets: Sequence[float],
    interval_seconds: float,
    outage: Outage | None = None,
    on_run_done: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Fire every run in every region, in schedule order, `interval_seconds` apart (wall
    clock), concurrently, like LocalScheduler.run_all; `outage` takes its region down when
    its first run is fired and up again when the run after its last is fired."""
    if not len(plan) == len(schedule_times) == len(offsets):
        raise ValueError("one RunFaults and one offset per schedule time")
    per_run: list[dict[str, RunResult]] = [{} for _ in schedule_times]
    speedup = next(iter(schedulers.values())).clock.speedup
    errors: list[BaseException] = []

    def fire(index: int) -> None:
        try:
            per_run[index] = deliver_in_regions(
                schedulers, index, schedule_times[index], offset=offsets[index], faults=plan[index]
            )
        except BaseException as error:  # re-raised in the caller's thread
            errors.append(error)
            return
        if on_run_done is not None:
            on_run_done(merged(per_run[index], offsets[index], speedup))

    threads = []
    for index in range(len(schedule_times)):
        if index:
            time.sleep(interval_seconds)
        if outage is not None and index == outage.first_run:
            switch.take_down(outage.region)
        if outage is not None and index == outage.first_run + outage.runs:
            switch.bring_up(outage.region)
        thread = threading.Thread(target=fire, args=(index,), name=f"run-{index}")
        threads.append(thread)
        thread.start()
    for thread in threads:
        thread.join()
    if outage is not None:
        switch.bring_up(outage.region)
    for scheduler in schedulers.values():
        scheduler.join_copies()  # a copy outlives its run's last attempt
    if errors:
        raise errors[0]
    return [merged(results, offset, speedup) for results, offset in zip(per_run, offsets, strict=True)]
