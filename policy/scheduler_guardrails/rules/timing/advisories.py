"""The advisory findings of two options that lean on Cloud Scheduler's retries: overlap `wait`
(a run waits for the earlier one through its retries) and `secondRegion` (the region whose
delivery finds the run in progress learns its end through its retries). Both ask whether a
retry before the next scheduled run arrives late enough; neither makes a config invalid.
Pure standard library, as rules.py, which holds the invalidating rules and the retry schedule.
"""

from __future__ import annotations

from exactly_once.config import TIME_LIMIT_MARGIN_SECONDS

from .cron import RunGap, shortest_gap

# The findings' wording and the job's time limit as rules.py writes and derives them, so an
# advisory reads like the rules beside it in `make check`'s output.
from .rules import (
    JobTiming,
    Violation,
    _s,
    _shortened,
    _time_limit,
    retry_arrivals_if_every_attempt_fails_instantly,
)


def check_wait_overlap(job: JobTiming) -> list[Violation]:
    """Advisory findings for a job whose overlap policy is `wait`.

    A run that finds an earlier run of its job still holding the job is answered 409 and
    comes back only through Cloud Scheduler's retries (which ignore Retry-After). It runs once
    the earlier run has finished, provided a retry still arrives by then: the earlier run can
    hold the job for up to its time limit while it runs, or its lease after a crash. Retries
    stop at the job's next scheduled run, and a job whose runs can take as long as its schedule
    interval queues every run behind the previous one.
    """
    violations: list[Violation] = []
    hold = max(job.lease_seconds, _time_limit(job))
    gap = shortest_gap(job.schedule, job.time_zone)
    arrivals = _retries_before_next_run(job, gap)
    if not arrivals or arrivals[-1] <= hold:
        last = _last_retry(arrivals)
        violations.append(
            Violation(
                "overlap-wait-window",
                (
                    "retry.retry_count",
                    "retry.min_backoff_seconds",
                    "retry.max_doublings",
                    "time_limit_seconds",
                    "lease_seconds",
                ),
                f"overlap 'wait' needs retries that outlast how long the earlier run can hold the job "
                f"({_s(hold)}: its time limit, or its lease after a crash), but {last}: a run that "
                "has to "
                "wait would never run; allow more or later retries",
                advisory=True,
            )
        )
    own_timeout = _time_limit(job) + TIME_LIMIT_MARGIN_SECONDS
    if gap is not None and own_timeout >= gap.seconds:
        violations.append(
            Violation(
                "overlap-wait-backlog",
                ("schedule", "time_limit_seconds"),
                f"overlap 'wait': a run may take {_s(own_timeout)}, as long as the "
                f"{_s(gap.seconds)} between scheduled runs{_shortened(gap)}, so runs can "
                "queue behind each "
                "other until their retries run out; schedule less often or use overlap 'skip'",
                advisory=True,
            )
        )
    return violations


def check_second_region(job: JobTiming) -> list[Violation]:
    """Advisory findings for a job deployed in two regions (`secondRegion`).

    Every run is delivered from both regions at about its schedule time. One delivery claims
    it; the other is answered 409 (in progress) and comes back through its own region's
    retries: the first retry after the run completed is answered "already completed", and a
    run whose region went down while it ran is taken over by the first retry after its lease
    ends, as late as the time limit plus the lease after the first attempt. Retries stop at
    the next scheduled run, so both hold only when a retry before it arrives that late;
    otherwise the other region's Scheduler run ends failed after a run that ran once, and a
    run whose region fell mid-run waits for the missed-run audit.
    """
    takeover = _time_limit(job) + job.lease_seconds
    gap = shortest_gap(job.schedule, job.time_zone)
    arrivals = _retries_before_next_run(job, gap)
    if arrivals and arrivals[-1] > takeover:
        return []
    last = _last_retry(arrivals)
    return [
        Violation(
            "second-region-retries",
            (
                "retry.retry_count",
                "retry.min_backoff_seconds",
                "retry.max_doublings",
                "time_limit_seconds",
                "lease_seconds",
            ),
            f"with a second region every run is delivered twice, and the delivery that finds the run in "
            f"progress needs a retry after the run's time limit and lease ({_s(takeover)}), but "
            f"{last}: "
            "its Cloud Scheduler run ends failed though the run ran once, and a run whose region goes "
            "down while it runs is left to the missed-run audit; allow more or later retries",
            advisory=True,
        )
    ]


def _retries_before_next_run(job: JobTiming, gap: RunGap | None) -> list[float]:
    """When each retry of a run whose every attempt fails at once arrives, after its first
    attempt: those before the job's next scheduled run (`gap`), where Cloud Scheduler stops."""
    arrivals = retry_arrivals_if_every_attempt_fails_instantly(job.retry)
    return [arrival for arrival in arrivals if gap is None or arrival < gap.seconds]


def _last_retry(arrivals: list[float]) -> str:
    if not arrivals:
        return "no retry"
    return f"the last retry arrives {_s(arrivals[-1])} after the first attempt"
