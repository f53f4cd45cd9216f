"""The stack's timing on the local run's compressed clock, and whether the compressed run can pass.

The local scheduler runs every duration `speedup` times faster (scheduler.CompressedClock), and
the function gets the same compression of its own: the lease, the attempt's time limit
(JOB_TIME_LIMIT_SECONDS, the function timeout less its margin) and the retention. Scaling
every duration by one factor keeps `timing.check_job_timing`'s verdict.

Two of them cannot shrink freely, because Firestore does not get faster with the clock:

- The lease. The ledger gives a claim at most half a lease and one Firestore call a third of
  that (exactly_once.ledger.store: store_deadline_for, ATTEMPT_SHARE), so that a slow call is
  retried within the claim's budget; the heartbeat renews every third of a lease. The stack's
  30 s lease compressed 20 times is 1.5 s, a quarter of a second per call: less than one
  Firestore round trip on a busy machine, and claims would fail for slowness alone. So the
  lease is at least the shortest that gives one call the slowest round trip the local run must
  ride out (`lease_floor_seconds`).
- The time limit. A claim may take its whole budget and still run the job, which then needs
  a round trip of its own (the demo job records its execution). The watchdog ends an attempt
  at its time limit together with its instance, and the local instances serve many requests
  at once, so a limit shorter than that would end healthy attempts and every request beside
  them. The time limit is at least the claim's budget plus one round trip; the function
  timeout and the attempt deadline are lengthened by as much.

Floored durations are longer, in simulated time, than the stack's: a crashed attempt blocks
its run for longer, and the retries must still outlast it. `CompressedTiming.problems` judges
the compressed timing by the stack's own rules, so a speed-up the local run cannot honour is
refused up front, naming the speed-up, instead of losing runs to it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from exactly_once.config import (
    DEFAULT_DATABASE,
    JOB_TABLE_ENV,
    JOB_TABLE_FILE,
    TIME_LIMIT_MARGIN_SECONDS,
    JobPolicy,
    JobTable,
)
from exactly_once.ledger.store import ATTEMPT_SHARE, store_deadline_for
from infra.settings.environment import function_environment, job_table
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.timing import rules as timing
from policy.scheduler_guardrails.rules.timing.rules import JobTiming

# The slowest Firestore round trip (emulator included) the local run rides out on a busy
# 2-core machine, before any delay added on purpose (--firestore-rtt-ms).
BUSY_ROUND_TRIP_SECONDS = 1.0
# A machine busier than that says so here, in seconds (slowest_round_trip_seconds).
SLOWEST_ROUND_TRIP_ENV = "LOCALRUN_SLOWEST_ROUND_TRIP_SECONDS"
# The job each instance's warm-up delivers before the clock starts (instances.py): never
# reported, the counts filter on the real job's name.
WARM_UP_JOB = "localrun-warm-up"


def slowest_round_trip_seconds() -> float:
    """The slowest round trip the local run rides out: BUSY_ROUND_TRIP_SECONDS, or what
    SLOWEST_ROUND_TRIP_ENV says. A compressed lease is floored for it, and a Firestore that
    answers a run's completion later than the lease leaves the run to a retry that runs the
    job again: a harness that serves its function on a machine it may share (round trips of
    several seconds were seen beside the test suite) says how slow it gets, and
    every lease and time limit is floored for that. Read once, by the demo's and the soak's
    entry points, which hand it on in their options."""
    value = os.environ.get(SLOWEST_ROUND_TRIP_ENV, "").strip()
    if not value:
        return BUSY_ROUND_TRIP_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not seconds >= BUSY_ROUND_TRIP_SECONDS or math.isinf(seconds):
        raise ValueError(
            f"{SLOWEST_ROUND_TRIP_ENV}={value}: want a number of seconds, at least "
            f"{BUSY_ROUND_TRIP_SECONDS:g} (a busy 2-core machine's)"
        )
    return seconds


def claim_budget_seconds(lease_seconds: float) -> float:
    """How long a claim may wait for Firestore, retries included, with this lease."""
    return store_deadline_for(timedelta(seconds=lease_seconds)).total_seconds()


def per_call_seconds(lease_seconds: float) -> float:
    """How long one Firestore call of a claim may take before it is retried, with this lease."""
    return claim_budget_seconds(lease_seconds) * ATTEMPT_SHARE


def lease_floor_seconds(round_trip_seconds: float) -> float:
    """The shortest lease whose claims give one Firestore call `round_trip_seconds` (and whose
    renewals, every third of a lease, get as long): 6 s for a round trip of 1 s."""
    if not round_trip_seconds > 0:
        raise ValueError(f"round trip must be positive, got {round_trip_seconds}")
    floor = round_trip_seconds / per_call_seconds(1.0)  # a call's share grows with the lease
    if per_call_seconds(floor) < round_trip_seconds * (1 - 1e-9):
        # The ledger caps a claim's budget whatever the lease: no lease is long enough.
        raise ValueError(
            f"a Firestore round trip of {round_trip_seconds:g}s is longer than any ledger call may "
            f"take, whatever the lease ({per_call_seconds(floor):g}s)"
        )
    return floor


@dataclass(frozen=True)
class CompressedTiming:
    """The function's durations on the local clock, in wall-clock seconds."""

    speedup: float
    round_trip_seconds: float  # the slowest Firestore round trip to ride out
    lease_seconds: float
    lease_floor_seconds: float
    time_limit_seconds: float
    time_limit_floor_seconds: float
    function_timeout_seconds: float
    retention_seconds: float
    # The uncompressed time limit these durations start from: the job's own, else the function's.
    simulated_time_limit_seconds: float

    @classmethod
    def of(
        cls,
        settings: StackSettings,
        speedup: float,
        *,
        round_trip_seconds: float,
        job: JobSettings | None = None,
    ) -> CompressedTiming:
        """The timing of a local run of `job` (of any job, when None). The local function
        serves the one job under test, so its time limit is that job's own."""
        if not speedup > 0:
            raise ValueError(f"speed-up must be positive, got {speedup}")
        lease_floor = lease_floor_seconds(round_trip_seconds)
        lease = max(settings.lease_seconds / speedup, lease_floor)
        time_limit_floor = claim_budget_seconds(lease) + round_trip_seconds
        simulated_limit = settings.time_limit_seconds if job is None else settings.job_time_limit(job)
        time_limit = max(simulated_limit / speedup, time_limit_floor)
        return cls(
            speedup=speedup,
            round_trip_seconds=round_trip_seconds,
            lease_seconds=lease,
            lease_floor_seconds=lease_floor,
            time_limit_seconds=time_limit,
            time_limit_floor_seconds=time_limit_floor,
            function_timeout_seconds=time_limit + TIME_LIMIT_MARGIN_SECONDS / speedup,
            retention_seconds=settings.retention_seconds / speedup,
            simulated_time_limit_seconds=simulated_limit,
        )

    def attempt_deadline_seconds(self, settings: StackSettings, job: JobSettings) -> float:
        """`job`'s attempt deadline, lengthened as much as the function timeout was: Scheduler
        waits as long for an answer relative to the timeout as it does in the cloud."""
        simulated_timeout = self.simulated_time_limit_seconds + TIME_LIMIT_MARGIN_SECONDS
        lengthened = self.function_timeout_seconds - simulated_timeout / self.speedup
        return job.attempt_deadline_seconds / self.speedup + lengthened

    def function_env(
        self,
        settings: StackSettings,
        *,
        firestore_project: str,
        emulator_host: str,
        table_dir: Path,
        handlers: bool = True,
    ) -> dict[str, str]:
        """The function's environment for a local run: the stack's own, with these durations,
        and Firestore at `emulator_host` (the emulator, or a proxy in front of it). The job
        table is written to a file in `table_dir`, as the stack ships it: the caller's own
        temporary directory, removed when its run ends, so no run leaves a table behind. Without
        `handlers`, every job runs JOB_HANDLER (the soak's stand-in job).

        `firestore_project` only isolates this run's documents in the emulator; the run ids
        still use the stack's project, which the deliveries carry in X-Job-Project.
        """
        env = function_environment(settings)
        # One job under test: its limit is JOB_TIME_LIMIT_SECONDS. And the local run replays
        # past schedule times at its own pace (scheduler.latest_fire_times): judged on the
        # wall clock, every run would be late, so no job keeps a starting deadline.
        stack_table = job_table(settings)
        policies = {
            job: dataclasses.replace(
                policy,
                time_limit_seconds=None,
                starting_deadline_seconds=None,
                handler=policy.handler if handlers else None,
            )
            for job, policy in stack_table.jobs.items()
        }
        # The warm-up's job (instances.py), which no report counts: the function serves only the
        # jobs its table names. Nothing of its own: it runs as a job that names no handler does.
        policies[settings.scheduler_job_id(WARM_UP_JOB)] = JobPolicy()
        table_path = table_dir / JOB_TABLE_FILE
        table_path.write_text(JobTable(jobs=policies, audit=stack_table.audit).to_json(), encoding="utf-8")
        env[JOB_TABLE_ENV] = str(table_path)
        env.update(
            GOOGLE_CLOUD_PROJECT=firestore_project,
            FIRESTORE_DATABASE=DEFAULT_DATABASE,
            FIRESTORE_EMULATOR_HOST=emulator_host,
            LEASE_SECONDS=repr(self.lease_seconds),
            JOB_TIME_LIMIT_SECONDS=repr(self.time_limit_seconds),
            RETENTION_SECONDS=repr(self.retention_seconds),
            THREADS="64",  # every concurrent run and duplicate gets a thread
        )
        return env

    def job_timing(self, settings: StackSettings, job: JobSettings) -> JobTiming:
        """`job`'s timing as the local run really has it, in simulated seconds."""
        return JobTiming(
            schedule=job.schedule,
            time_zone=job.time_zone,
            attempt_deadline_seconds=self.attempt_deadline_seconds(settings, job) * self.speedup,
            function_timeout_seconds=self.function_timeout_seconds * self.speedup,
            lease_seconds=self.lease_seconds * self.speedup,
            retention_seconds=settings.retention_seconds,
            retry=job.retry,
            time_limit_seconds=self.time_limit_seconds * self.speedup,
        )

    def floors(self) -> str:
        """The floored durations, for people: empty when none is floored."""
        floored = []
        if self.lease_seconds == self.lease_floor_seconds:
            floored.append(
                f"lease {self.lease_seconds:g}s, which gives one Firestore call "
                f"{per_call_seconds(self.lease_seconds):g}s"
            )
        if self.time_limit_seconds == self.time_limit_floor_seconds:
            floored.append(
                f"time limit {self.time_limit_seconds:g}s, a claim's whole budget and one more round trip"
            )
        if not floored:
            return ""
        return f"floored for a Firestore round trip of up to {self.round_trip_seconds:g}s: " + "; ".join(
            floored
        )

    def problems(self, settings: StackSettings, job: JobSettings) -> list[str]:
        """Why a local run of `job` at this speed-up could not pass, whatever the function
        does; empty when it can. Advisory findings are not problems."""
        why = f"at speed-up x{self.speedup:g}"
        if floors := self.floors():
            why += f" (durations {floors}; times below are simulated)"
        found = [
            f"{why}: {violation.rule}: {violation.message}"
            for violation in timing.check_job_timing(self.job_timing(settings, job))
            if not violation.advisory
        ]
        if self.retention_seconds < self.lease_seconds:
            found.append(
                f"{why}: the retention compressed to {self.retention_seconds:g}s ends before the "
                f"lease of {self.lease_seconds:g}s"
            )
        return found


# The speed-ups tried, fastest first, when the default one cannot honour a job's timing.
_SLOWER_SPEEDUPS = (15.0, 12.0, 10.0, 8.0, 6.0, 5.0, 4.0, 3.0, 2.5, 2.0, 1.5, 1.25, 1.0)


def fitting_speedup(
    settings: StackSettings, job: JobSettings, wanted: float, *, round_trip_seconds: float
) -> float:
    """The fastest speed-up up to `wanted` at which a local run of `job` can pass.

    The floors are wall-clock seconds, so they weigh more in simulated time the faster the
    clock runs: a job whose retries outlast the stack's 30 s lease but not the floored one
    (120 s of simulated time at x20) could not pass at x20, although the real stack accepts it.
    Compressing less shrinks the floors back toward the stack's own durations; at x1 nothing
    is compressed, and a stack that loads is run as it is, whatever the floors still say."""
    for speedup in (wanted, *(s for s in _SLOWER_SPEEDUPS if s < wanted)):
        timing_at = CompressedTiming.of(settings, speedup, round_trip_seconds=round_trip_seconds, job=job)
        if not timing_at.problems(settings, job):
            return speedup
    return min(wanted, 1.0)
