"""The soak's faults, and each run's fault schedule drawn from a seed.

A run's schedule is drawn from its own generator, seeded by the soak's seed and the run's
index, so run 17 of seed 3 has the same faults in a soak of 300 runs or of 10,000, and
`--only 17` replays it alone. Only the top-up (every kind on at least `min_each` runs) depends
on the number of runs, so a replay names the same `--runs` as the soak it replays.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class SoakFault(enum.StrEnum):
    """What can go wrong around one delivery of a run: one kind per member."""

    # Delivery faults, which Cloud Scheduler (or a proxy before the function) produces.
    CONCURRENT = "concurrent"  # a copy of the attempt sent at the same time
    DUPLICATE = "duplicate"  # the attempt sent again once it was answered
    LOST_REPLY = "lost_reply"  # the function answers; the answer never reaches the scheduler
    FORCED = "forced"  # someone forces a run: a delivery of the next fire time, ahead of it
    # Firestore faults, between one instance and the emulator (a TCP proxy per instance).
    LOST_COMMIT_ANSWER = "lost_commit_answer"  # Firestore commits; its answer is lost
    FIRESTORE_SLOW = "firestore_slow"  # the claim's request held a few seconds
    FIRESTORE_CUT = "firestore_cut"  # connections refused or black-holed for a while
    # Instance faults.
    KILL_MID_JOB = "kill_mid_job"  # SIGKILL while the job works
    KILL_MID_COMMIT = "kill_mid_commit"  # SIGKILL once a commit landed, before its answer did
    FREEZE = "freeze"  # SIGSTOP while the job works, SIGCONT once another attempt took over
    CLOCK_SKEW = "clock_skew"  # the attempt served by an instance whose clock is 2 minutes off
    # Job faults, carried out by the soak job's body.
    HANG = "hang"  # works past its time limit: the watchdog ends it with its instance
    RAISE = "raise"  # raises before its side effect: released, retried
    EXIT = "exit"  # sys.exit() before its side effect: released, retried
    UNSTORABLE = "unstorable"  # returns a value a run cannot store: failed terminally, once
    # A region's fault, in a soak of two regions (localrun/regions.py): one region's scheduler
    # sends nothing for a few seconds, from this run on; the other region delivers alone.
    REGION_DOWN = "region_down"


# Combine with any other fault of the run.
COMBINABLE: tuple[SoakFault, ...] = (SoakFault.CONCURRENT, SoakFault.DUPLICATE)
# At most one per run: each shapes the first attempt itself.
PRIMARY: tuple[SoakFault, ...] = tuple(fault for fault in SoakFault if fault not in COMBINABLE)
# Faults that end, freeze or cut off the attempt's instance, or hold its Firestore: the attempt
# is sent to an instance serving nothing else, as in the cloud (one request per instance), so
# the fault lands on its run and cuts no other run short after its side effect.
ALONE: frozenset[SoakFault] = frozenset(
    {
        SoakFault.LOST_COMMIT_ANSWER,
        SoakFault.FIRESTORE_SLOW,
        SoakFault.FIRESTORE_CUT,
        SoakFault.KILL_MID_JOB,
        SoakFault.KILL_MID_COMMIT,
        SoakFault.FREEZE,
        SoakFault.HANG,
    }
)
# Which commit a commit fault aims at: the claim's, or the completion's.
CLAIM, FINISH = "claim", "finish"
# Which region a region's fault takes down (localrun/regions.py's labels), and for how long
# (wall-clock seconds: many runs, and the retries of the runs before them).
REGIONS = ("a", "b")
REGION_DOWN_SECONDS = (2.0, 6.0)
# The faults that need a second region.
TWO_REGIONS: tuple[SoakFault, ...] = (SoakFault.REGION_DOWN,)

DEFAULT_PRIMARY_RATE = 0.02
DEFAULT_COMBINABLE_RATE = 0.04
# The longest plain job, in wall-clock seconds: short work, many runs.
MAX_PLAIN_SLEEP_SECONDS = 0.3


@dataclass(frozen=True)
class RunPlan:
    """One run's fault schedule, on its first attempt (retries show the recovery)."""

    index: int
    primary: SoakFault | None = None
    concurrent: bool = False
    duplicate: bool = False
    # The fault's details: which commit, which cut, which unstorable value, which skew.
    variant: str = ""
    # Seconds: a slow Firestore's hold, a cut's length; the plain job's sleep otherwise.
    seconds: float = 0.0
    sleep_seconds: float = 0.0

    @property
    def kinds(self) -> tuple[SoakFault, ...]:
        combined = tuple(
            fault
            for fault, on in ((SoakFault.CONCURRENT, self.concurrent), (SoakFault.DUPLICATE, self.duplicate))
            if on
        )
        return ((self.primary,) if self.primary else ()) + combined

    def describe(self) -> dict[str, Any]:
        return {
            "run": self.index,
            "faults": [fault.value for fault in self.kinds],
            "variant": self.variant,
            "seconds": round(self.seconds, 3),
            "sleep_seconds": round(self.sleep_seconds, 3),
        }


def _variant(fault: SoakFault | None, rng: random.Random) -> tuple[str, float]:
    if fault in (SoakFault.KILL_MID_COMMIT, SoakFault.LOST_COMMIT_ANSWER):
        return rng.choice((CLAIM, FINISH)), 0.0
    if fault is SoakFault.FIRESTORE_SLOW:
        return "", rng.uniform(0.5, 3.0)
    if fault is SoakFault.FIRESTORE_CUT:
        return rng.choice(("refuse", "blackhole")), rng.uniform(0.5, 3.0)
    if fault is SoakFault.UNSTORABLE:
        return rng.choice(("too_large", "not_json")), 0.0
    if fault is SoakFault.CLOCK_SKEW:
        return rng.choice(("+120s", "-120s")), 0.0
    if fault is SoakFault.REGION_DOWN:
        return rng.choice(REGIONS), rng.uniform(*REGION_DOWN_SECONDS)
    return "", 0.0


def _run_plan(index: int, seed: int, primary_rate: float, combinable_rate: float) -> RunPlan:
    rng = random.Random(f"soak:{seed}:{index}")
    draw = rng.random()
    primary: SoakFault | None = None
    for fault in PRIMARY:
        draw -= primary_rate
        if draw < 0:
            primary = fault
            break
    return _with_primary(
        RunPlan(
            index,
            concurrent=rng.random() < combinable_rate,
            duplicate=rng.random() < combinable_rate,
            sleep_seconds=rng.uniform(0.0, MAX_PLAIN_SLEEP_SECONDS),
        ),
        primary,
        rng,
    )


def _with_primary(plan: RunPlan, primary: SoakFault | None, rng: random.Random) -> RunPlan:
    variant, seconds = _variant(primary, rng)
    return dataclasses.replace(plan, primary=primary, variant=variant, seconds=seconds)


def plan_soak(
    runs: int,
    seed: int,
    *,
    min_each: int = 20,
    primary_rate: float = DEFAULT_PRIMARY_RATE,
    combinable_rate: float = DEFAULT_COMBINABLE_RATE,
    excluded: Sequence[SoakFault] = (),
    regions: int = 1,
) -> list[RunPlan]:
    """Every run's schedule, with every kind not `excluded` on at least `min_each` runs (as
    many as there are runs free for it, in a short soak); a region's fault only in a soak of
    two `regions`. The kinds only two regions have come last, so a soak of one region plans
    exactly what it planned before they existed."""
    if regions < 2:
        excluded = (*excluded, *TWO_REGIONS)
    if len(PRIMARY) * primary_rate > 1:
        raise ValueError(f"{len(PRIMARY)} primary faults at {primary_rate:g} each add up to more than 1")
    plans = [_run_plan(index, seed, primary_rate, combinable_rate) for index in range(runs)]
    plans = [
        _with_primary(plan, None, random.Random(0)) if plan.primary in excluded else plan for plan in plans
    ]
    plans = [
        dataclasses.replace(
            p,
            concurrent=p.concurrent and SoakFault.CONCURRENT not in excluded,
            duplicate=p.duplicate and SoakFault.DUPLICATE not in excluded,
        )
        for p in plans
    ]
    rng = random.Random(f"soak-top-up:{seed}:{runs}")
    for fault in PRIMARY:
        if fault in excluded:
            continue
        missing = min_each - sum(plan.primary is fault for plan in plans)
        free = [plan.index for plan in plans if plan.primary is None]
        for index in rng.sample(free, max(0, min(missing, len(free)))):
            plans[index] = _with_primary(plans[index], fault, random.Random(f"soak:{seed}:{index}:{fault}"))
    for fault in COMBINABLE:
        if fault in excluded:
            continue
        field = fault.value
        missing = min_each - sum(getattr(plan, field) for plan in plans)
        free = [plan.index for plan in plans if not getattr(plan, field)]
        for index in rng.sample(free, max(0, min(missing, len(free)))):
            old = plans[index]
            plans[index] = dataclasses.replace(
                old,
                concurrent=old.concurrent or fault is SoakFault.CONCURRENT,
                duplicate=old.duplicate or fault is SoakFault.DUPLICATE,
            )
    return plans


def planned_counts(plans: Sequence[RunPlan]) -> dict[str, int]:
    return {fault.value: sum(fault in plan.kinds for plan in plans) for fault in SoakFault}
