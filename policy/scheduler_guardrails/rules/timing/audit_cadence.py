"""How often the stack's missed-run audit runs, and how long after a run's schedule time the
audit may judge it: arithmetic on the lease and a job's retries alone.

Kept in the timing room, below the settings, so that the settings can refuse a catch-up
window the audit cannot serve (rules/timing/catchup.py) with the very numbers the stack
schedules the audit by (infra/plan/audit_job.py).
"""

from __future__ import annotations

import math

from .rules import RetryConfig, latest_retry_arrival_seconds

# The audit's retries: five, doubling three times, arrive 1, 3, 7, 15 and 31 first backoffs
# after the first attempt; the first backoff is a twentieth of the lease (at least the
# jobs' default first backoff).
RETRY_SPAN_IN_BACKOFFS = 31
BACKOFFS_PER_LEASE = 20
# Cloud Scheduler starts an attempt a little after its scheduled time; allow for that.
DISPATCH_SLACK_SECONDS = 60.0


def retry_window(retry: RetryConfig, attempt_deadline_seconds: float, lease_seconds: float) -> float:
    """From a run's schedule time until no attempt of it can still arrive or be running:
    the latest retry arrival (every attempt using its whole deadline), plus a lease for
    the last attempt's claim, plus Scheduler's dispatch delay."""
    latest = latest_retry_arrival_seconds(retry, attempt_deadline_seconds)
    return latest + lease_seconds + DISPATCH_SLACK_SECONDS


def first_backoff(lease_seconds: float, least_seconds: float) -> float:
    """The audit's first retry backoff: a twentieth of the lease, at least `least_seconds`."""
    return max(least_seconds, float(math.ceil(lease_seconds / BACKOFFS_PER_LEASE)))


def audit_interval_hours(lease_seconds: float, least_backoff_seconds: float) -> int:
    """Hours between audit runs: one, unless the audit's last retry (about one and a half
    leases out) would not arrive before the next run, which ends the retries."""
    last_retry = RETRY_SPAN_IN_BACKOFFS * first_backoff(lease_seconds, least_backoff_seconds)
    return 1 if last_retry < 3600 else math.ceil((last_retry + 1) / 3600)
