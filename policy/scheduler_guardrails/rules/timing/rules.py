"""Cloud Scheduler's retry schedule and the timing invariants that make dedup safe.

This is the one implementation of both. The stack's config validation, the policy pack and
the local Cloud Scheduler all import it, so a fork cannot end up with a simulator that
retries differently from the checks that approved its config.

Pure standard library on purpose: it is imported by the Pulumi program, by the policy pack
(which runs in its own virtualenv) and by tests, none of which should pay for the others'
dependencies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exactly_once.config import RENEWALS_PER_LEASE, TIME_LIMIT_MARGIN_SECONDS, time_limit_for_timeout

from .cron import DEFAULT_TIME_ZONE, RunGap, shortest_gap, unix_cron_error

# Limits documented by Cloud Scheduler and Cloud Run functions.
MIN_ATTEMPT_DEADLINE_SECONDS = 15.0
MAX_ATTEMPT_DEADLINE_SECONDS = 1800.0
MAX_RETRY_COUNT = 5
MAX_HTTP_FUNCTION_TIMEOUT_SECONDS = 3600.0
# A lease is renewed RENEWALS_PER_LEASE times per lease, and an attempt that cannot renew for
# most of a lease is ended: below this, a few slow Firestore calls in a row would end healthy
# attempts.
MIN_LEASE_SECONDS = 10.0
# How far the attempt deadline may stray from the function timeout before we say so.
DEADLINE_TIMEOUT_TOLERANCE_SECONDS = 5.0
# The shortest startingDeadlineSeconds: an on-time run reaches the ledger after Cloud Scheduler's
# dispatch and, on a cold instance, the function's start, which together take seconds; a shorter
# deadline would skip runs that were never late.
MIN_STARTING_DEADLINE_SECONDS = 10.0
_RETRY_LOOP_CAP = 10_000


@dataclass(frozen=True)
class RetryConfig:
    """A Cloud Scheduler `retryConfig`, in seconds. Defaults are Cloud Scheduler's own."""

    retry_count: int = 0
    max_retry_duration_seconds: float = 0.0
    min_backoff_seconds: float = 5.0
    max_backoff_seconds: float = 3600.0
    max_doublings: int = 5

    def backoff_before_retry(self, retry_number: int) -> float:
        """Wait before retry `retry_number` (1-based) after the previous attempt failed.

        Cloud Scheduler doubles `min_backoff` `max_doublings` times, then grows linearly by
        `min_backoff * 2**max_doublings`, capped at `max_backoff`
        (10s/300s/3 doublings -> 10, 20, 40, 80, 160, 240, 300, 300 ...).
        """
        if retry_number < 1:
            raise ValueError(f"retry_number starts at 1, got {retry_number}")
        step = retry_number - 1
        if step <= self.max_doublings:
            delay = self.min_backoff_seconds * 2**step
        else:
            delay = self.min_backoff_seconds * 2**self.max_doublings * (step - self.max_doublings + 1)
        return float(min(delay, self.max_backoff_seconds))

    def next_retry_delay(self, retries_done: int, seconds_since_first_attempt: float) -> float | None:
        """Delay before the next retry, or None when Cloud Scheduler would stop retrying.

        We stop at whichever limit comes first (count, or `max_retry_duration` when non-zero).
        Cloud Scheduler may keep going until both are reached; `latest_retry_arrival_seconds`
        covers that reading, so each check takes the side that is safe for it.
        """
        if retries_done >= self.retry_count:
            return None
        delay = self.backoff_before_retry(retries_done + 1)
        if self.max_retry_duration_seconds and (
            seconds_since_first_attempt + delay > self.max_retry_duration_seconds
        ):
            return None
        return delay


@dataclass(frozen=True)
class JobTiming:
    """Everything about one scheduled job that decides whether a run can be lost or doubled."""

    schedule: str
    attempt_deadline_seconds: float
    function_timeout_seconds: float
    lease_seconds: float
    retention_seconds: float
    retry: RetryConfig
    # The job's time limit as deployed (its job table entry, else JOB_TIME_LIMIT_SECONDS);
    # None: the one the stack derives from the function timeout.
    time_limit_seconds: float | None = None
    # jobs[].startingDeadlineSeconds (its job table entry); None: runs are never late.
    starting_deadline_seconds: float | None = None
    # The IANA zone the schedule is read in: the gaps between runs are elapsed time in it.
    time_zone: str = DEFAULT_TIME_ZONE


@dataclass(frozen=True)
class Violation:
    """One broken rule. `fields` name JobTiming / RetryConfig attributes, so callers can map
    them to their own vocabulary (Pulumi config keys, engine property names)."""

    rule: str
    fields: tuple[str, ...]
    message: str
    advisory: bool = False


def retry_arrivals_if_every_attempt_fails_instantly(retry: RetryConfig) -> list[float]:
    """Seconds after the first attempt at which each retry arrives, when every attempt fails
    at once. This is the earliest retries can come: the crash-recovery worst case."""
    arrivals: list[float] = []
    elapsed = 0.0
    while (delay := retry.next_retry_delay(len(arrivals), elapsed)) is not None:
        elapsed += delay
        arrivals.append(elapsed)
    return arrivals


def latest_retry_arrival_seconds(retry: RetryConfig, attempt_deadline_seconds: float) -> float:
    """Upper bound on when the last attempt of a run can still be running, counted from the
    first attempt: every attempt uses its whole deadline, every backoff is waited out, and
    retries continue until both the count and `max_retry_duration` are spent."""
    elapsed = attempt_deadline_seconds
    retries = 0
    # The cap only guards against configs that check_job_timing rejects anyway (zero backoff).
    while retries < _RETRY_LOOP_CAP and (
        retries < retry.retry_count
        or (retry.max_retry_duration_seconds and elapsed < retry.max_retry_duration_seconds)
    ):
        retries += 1
        elapsed += retry.backoff_before_retry(retries) + attempt_deadline_seconds
    return elapsed


def check_job_timing(job: JobTiming) -> list[Violation]:
    """All timing rules for one job; an empty list means a run can be neither lost nor doubled
    by timing alone. Advisory violations are returned too, flagged as such."""
    violations: list[Violation] = []
    retry = job.retry

    if (error := unix_cron_error(job.schedule)) is not None:
        violations.append(Violation("unix-cron", ("schedule",), error))

    if not MIN_ATTEMPT_DEADLINE_SECONDS <= job.attempt_deadline_seconds <= MAX_ATTEMPT_DEADLINE_SECONDS:
        violations.append(
            Violation(
                "attempt-deadline-range",
                ("attempt_deadline_seconds",),
                f"attempt deadline {_s(job.attempt_deadline_seconds)} is outside Cloud Scheduler's "
                f"HTTP range {_s(MIN_ATTEMPT_DEADLINE_SECONDS)}..{_s(MAX_ATTEMPT_DEADLINE_SECONDS)}",
            )
        )
    if not 0 < job.function_timeout_seconds <= MAX_HTTP_FUNCTION_TIMEOUT_SECONDS:
        violations.append(
            Violation(
                "function-timeout-range",
                ("function_timeout_seconds",),
                f"function timeout {_s(job.function_timeout_seconds)} must be within "
                f"1s..{_s(MAX_HTTP_FUNCTION_TIMEOUT_SECONDS)} for HTTP functions",
            )
        )
    violations.extend(_retry_config_violations(retry))

    if job.lease_seconds < MIN_LEASE_SECONDS:
        violations.append(
            Violation(
                "lease-renewable",
                ("lease_seconds",),
                f"lease {_s(job.lease_seconds)} is shorter than {_s(MIN_LEASE_SECONDS)}: renewed every "
                f"{_s(job.lease_seconds / RENEWALS_PER_LEASE)}, a few slow Firestore calls would end "
                "healthy attempts",
            )
        )
    time_limit = _time_limit(job)
    ceiling = time_limit_for_timeout(job.function_timeout_seconds)
    if not 0 < time_limit <= ceiling:
        violations.append(
            Violation(
                "time-limit-before-timeout",
                ("time_limit_seconds", "function_timeout_seconds"),
                f"the job's time limit {_s(time_limit)} must be positive and at most the function timeout "
                f"{_s(job.function_timeout_seconds)} less {_s(TIME_LIMIT_MARGIN_SECONDS)} ({_s(ceiling)}): "
                "one function runs every job of a stack and Cloud Run does not stop a timed-out request's "
                "code, so each attempt is ended while its request still has CPU; raise the function timeout "
                f"(at most {_s(MAX_HTTP_FUNCTION_TIMEOUT_SECONDS)}) or give the job a stack of its own",
            )
        )

    # A rule below reads values the checks above may have refused: run on a refused value, it
    # would only restate that refusal as a consequence (a retry count of -1 "loses the run"),
    # naming more keys than the one to fix. So each runs only on values that passed their own.
    refused = {field.partition(".")[0] for violation in violations for field in violation.fields}

    def sound(*fields: str) -> bool:
        return refused.isdisjoint(fields)

    # Retries stop at the next scheduled execution at the latest: only those before it count.
    gap = shortest_gap(job.schedule, job.time_zone)
    interval = gap.seconds if gap is not None else None
    arrivals = [
        arrival
        for arrival in retry_arrivals_if_every_attempt_fails_instantly(retry)
        if interval is None or arrival < interval
    ]
    last_arrival = arrivals[-1] if arrivals else 0.0
    if last_arrival <= job.lease_seconds and sound("retry", "schedule", "lease_seconds"):
        before_next = (
            f", before the next scheduled run {_s(gap.seconds)} later{_shortened(gap)}"
            if gap is not None
            else ""
        )
        violations.append(
            Violation(
                "retry-outlives-lease",
                (
                    "retry.retry_count",
                    "retry.min_backoff_seconds",
                    "retry.max_doublings",
                    "retry.max_backoff_seconds",
                    "retry.max_retry_duration_seconds",
                    "lease_seconds",
                ),
                f"if an attempt crashes, its lease of {_s(job.lease_seconds)} blocks the run, but the last "
                f"retry arrives {_s(last_arrival)} after the first attempt "
                f"({_retries(arrivals)}{before_next}): "
                "the run would be lost; allow more or later retries, or a shorter lease",
            )
        )

    latest = latest_retry_arrival_seconds(retry, job.attempt_deadline_seconds)
    if job.retention_seconds < latest and sound("retry", "attempt_deadline_seconds"):
        violations.append(
            Violation(
                "retention-outlives-retries",
                ("retention_seconds",),
                f"retention {_s(job.retention_seconds)} ends before the latest retry can arrive "
                f"({_s(latest)} after the first attempt): a late retry would run the job again",
            )
        )
    if gap is not None and latest > gap.seconds and sound("retry", "schedule", "attempt_deadline_seconds"):
        violations.append(
            Violation(
                "retries-fit-schedule",
                ("schedule", "retry.retry_count", "attempt_deadline_seconds"),
                f"retries can go on for {_s(latest)}, longer than the {_s(gap.seconds)} between scheduled "
                f"runs{_shortened(gap)}: Cloud Scheduler then stops retrying at the next run, or skips that "
                "run; schedule less often, or allow fewer or shorter retries",
                advisory=True,
            )
        )

    own_timeout = time_limit + TIME_LIMIT_MARGIN_SECONDS
    if abs(job.attempt_deadline_seconds - own_timeout) > DEADLINE_TIMEOUT_TOLERANCE_SECONDS and sound(
        "attempt_deadline_seconds", "time_limit_seconds", "function_timeout_seconds"
    ):
        violations.append(
            Violation(
                "deadline-matches-timeout",
                ("attempt_deadline_seconds", "time_limit_seconds"),
                f"attempt deadline {_s(job.attempt_deadline_seconds)} differs from how long an attempt may "
                f"take, the job's time limit + {_s(TIME_LIMIT_MARGIN_SECONDS)} = {_s(own_timeout)}, by more "
                f"than {_s(DEADLINE_TIMEOUT_TOLERANCE_SECONDS)}: Scheduler gives up early and retries into "
                "409s, or waits on an attempt already ended",
                advisory=True,
            )
        )
    if sound("retry", "lease_seconds"):
        violations.extend(_starting_deadline_violations(job))
    return violations


def _starting_deadline_violations(job: JobTiming) -> list[Violation]:
    """A starting deadline is measured from the ScheduleTime, and every retry of a run arrives
    later than its first attempt: a deadline the retries cannot meet makes them pointless."""
    deadline = job.starting_deadline_seconds
    if deadline is None:
        return []
    if not MIN_STARTING_DEADLINE_SECONDS <= deadline < math.inf:
        return [
            Violation(
                "starting-deadline-range",
                ("starting_deadline_seconds",),
                f"starting deadline {_s(deadline)} must be a finite number of seconds, at least "
                f"{_s(MIN_STARTING_DEADLINE_SECONDS)}: a run reaches the function seconds after its time "
                "(Cloud Scheduler's dispatch, a cold start), so a shorter one would skip runs that were "
                "on time",
            )
        ]
    arrivals = retry_arrivals_if_every_attempt_fails_instantly(job.retry)
    if arrivals and deadline < arrivals[0]:
        return [
            Violation(
                "starting-deadline-admits-retries",
                ("starting_deadline_seconds", "retry.retry_count", "retry.min_backoff_seconds"),
                f"starting deadline {_s(deadline)} ends before the first retry can arrive "
                f"({_s(arrivals[0])} after the first attempt): every retry would be skipped as late, and "
                "a run whose first attempt fails would never run; allow at least the first backoff",
            )
        ]
    takeover = next((arrival for arrival in arrivals if arrival >= job.lease_seconds), None)
    if takeover is not None and deadline < takeover:
        return [
            Violation(
                "starting-deadline-crash-recovery",
                ("starting_deadline_seconds", "lease_seconds"),
                f"starting deadline {_s(deadline)} ends before the first retry that can take over a "
                f"crashed attempt's lease of {_s(job.lease_seconds)} ({_s(takeover)} after the first "
                "attempt): a run whose attempt crashes is skipped as late instead of run again",
                advisory=True,
            )
        ]
    return []


def _retry_config_violations(retry: RetryConfig) -> list[Violation]:
    violations: list[Violation] = []
    if not 0 <= retry.retry_count <= MAX_RETRY_COUNT:
        violations.append(
            Violation(
                "retry-count-range",
                ("retry.retry_count",),
                f"retry count {retry.retry_count} is outside Cloud Scheduler's range 0..{MAX_RETRY_COUNT}",
            )
        )
    if retry.min_backoff_seconds <= 0 or retry.max_backoff_seconds < retry.min_backoff_seconds:
        violations.append(
            Violation(
                "backoff-range",
                ("retry.min_backoff_seconds", "retry.max_backoff_seconds"),
                f"backoffs must satisfy 0 < min ({_s(retry.min_backoff_seconds)}) <= max "
                f"({_s(retry.max_backoff_seconds)})",
            )
        )
    if retry.max_doublings < 0 or retry.max_retry_duration_seconds < 0:
        violations.append(
            Violation(
                "retry-non-negative",
                ("retry.max_doublings", "retry.max_retry_duration_seconds"),
                f"max doublings ({retry.max_doublings}) and max retry duration "
                f"({_s(retry.max_retry_duration_seconds)}) cannot be negative",
            )
        )
    return violations


def _shortened(gap: RunGap) -> str:
    """Which runs a clock change brings closer than the wall clock says, when it does: else a
    user who wrote an every-two-hours schedule would wonder where 3600s came from."""
    if gap.clock_change >= 0:
        return ""
    return (
        f", as {gap.earlier.tzinfo}'s clocks go forward between the runs at "
        f"{gap.earlier:%Y-%m-%d %H:%M %Z} and {gap.later:%H:%M %Z}"
    )


def _time_limit(job: JobTiming) -> float:
    """How long one attempt's job may run: as deployed, else as the stack derives it."""
    if job.time_limit_seconds is not None:
        return job.time_limit_seconds
    return time_limit_for_timeout(job.function_timeout_seconds)


def _s(seconds: float) -> str:
    return f"{seconds:g}s"


def _retries(arrivals: list[float]) -> str:
    """'2 retries at 15s, 45s', '1 retry at 15s' or 'no retries'."""
    if not arrivals:
        return "no retries"
    noun = "retry" if len(arrivals) == 1 else "retries"
    return f"{len(arrivals)} {noun} at {', '.join(_s(a) for a in arrivals)}"
