"""The at-least-once faults the local Cloud Scheduler injects, planned up front from a seed.

The plan is drawn before anything is sent, so a seed names the same faults on the same runs
every time; only the timing of a real emulator and a real server varies between runs.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass


class Fault(enum.StrEnum):
    """What can go wrong between Cloud Scheduler and the function, one per kind."""

    # A second, concurrent copy of an attempt (a proxy or Scheduler itself redelivering).
    DUPLICATE = "duplicate"
    # The target processed the request but the response never reached Scheduler.
    LOST_ACK = "lost_ack"
    # The job hangs past its time limit: the function's watchdog ends the attempt with its
    # instance, Scheduler hears nothing and retries; a retry takes the run over after the lease.
    SLOW = "slow"
    # The function instance dies (SIGKILL) while the job sleeps; its lease stays behind.
    CRASH = "crash"
    # The job fails once (retryable); the record is released for the next retry.
    FAIL = "fail"


# Faults that shape the first attempt itself; at most one of them per run, since a slow
# attempt cannot also be a crashed one. DUPLICATE combines with any of them.
PRIMARY_FAULTS: tuple[Fault, ...] = (Fault.LOST_ACK, Fault.SLOW, Fault.CRASH, Fault.FAIL)
# Faults the demo job carries out from its body (`sleep_seconds`, `fail`): a job of your own
# cannot be told to hang, to be inside its work when its instance is killed, or to fail once.
# Killing it at a random moment could land after its side effect and before the completing
# write, a second execution no ledger can prevent (docs/jobs.md). Its local run injects the
# delivery faults only: duplicates and lost answers.
JOB_FAULTS: tuple[Fault, ...] = (Fault.SLOW, Fault.CRASH, Fault.FAIL)


@dataclass(frozen=True)
class FaultRates:
    """Probability per scheduled run of each fault on its first attempt."""

    duplicate: float = 0.2
    lost_ack: float = 0.1
    slow: float = 0.15
    crash: float = 0.1
    fail: float = 0.1

    def rate(self, fault: Fault) -> float:
        return float(getattr(self, fault.value))

    def without(self, faults: Sequence[Fault]) -> FaultRates:
        return dataclasses.replace(self, **{fault.value: 0.0 for fault in faults})

    def validate(self) -> None:
        for fault in Fault:
            if not 0.0 <= self.rate(fault) <= 1.0:
                raise ValueError(f"{fault.value} rate {self.rate(fault)} is outside 0..1")
        primary = sum(self.rate(fault) for fault in PRIMARY_FAULTS)
        if primary > 1.0:
            raise ValueError(
                f"lost_ack + slow + crash + fail rates add up to {primary:g}: "
                "a run gets at most one of them, so they must not exceed 1"
            )


@dataclass(frozen=True)
class RunFaults:
    """Faults planned for one scheduled run; they apply to its first attempt only, so the
    retries show how the system recovers rather than piling on more chaos."""

    primary: Fault | None = None
    duplicate: bool = False

    @property
    def kinds(self) -> tuple[Fault, ...]:
        return ((self.primary,) if self.primary else ()) + ((Fault.DUPLICATE,) if self.duplicate else ())


NO_FAULTS = RunFaults()


def plan_faults(
    runs: int, rates: FaultRates, seed: int, *, each_at_least_once: bool = True
) -> list[RunFaults]:
    """Faults per run, reproducible from `seed`.

    With `each_at_least_once`, every kind whose rate is non-zero is placed on some run even
    when the dice never chose it, so a short demo or CI run always exercises every kind.
    """
    rates.validate()
    rng = random.Random(seed)
    primaries: list[Fault | None] = []
    duplicates: list[bool] = []
    for _ in range(runs):
        draw = rng.random()
        chosen: Fault | None = None
        for fault in PRIMARY_FAULTS:
            draw -= rates.rate(fault)
            if draw < 0:
                chosen = fault
                break
        primaries.append(chosen)
        duplicates.append(rng.random() < rates.duplicate)

    if each_at_least_once:
        for fault in PRIMARY_FAULTS:
            if rates.rate(fault) > 0 and fault not in primaries:
                free = [index for index, primary in enumerate(primaries) if primary is None]
                if free:
                    primaries[rng.choice(free)] = fault
        if rates.duplicate > 0 and runs and not any(duplicates):
            duplicates[rng.randrange(runs)] = True
    return [RunFaults(primary, duplicate) for primary, duplicate in zip(primaries, duplicates, strict=True)]


def fault_counts(plan: Sequence[RunFaults]) -> dict[str, int]:
    return {fault.value: sum(fault in run.kinds for run in plan) for fault in Fault}
