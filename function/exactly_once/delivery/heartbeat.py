"""Keep a running attempt's lease, and end the attempt before anyone else could take the run.

A run's lease is short (LEASE_SECONDS, 30 s in the stack) so that a crashed instance's run is
taken over by a retry within about one lease, whatever the function timeout. While the job
runs, a heartbeat renews the lease every third of a lease with one conditional write; a job
shorter than that costs no renewal at all. The same thread is the attempt's watchdog, and it
ends the instance's process (Python cannot stop a thread that does not cooperate) when:

- the attempt reaches its time limit. Cloud Run answers a request at its timeout but does not
  stop the code handling it, so an overrunning job is stopped here, before that timeout,
  while the request still has its CPU;
- no renewal has been confirmed for most of a lease. Firestore may be unreachable from here
  but not from a retry on another instance, which takes the run over once the lease ends;
- a renewal finds the run taken over (only possible if this process was frozen for longer
  than a lease).

So the lease always outlives the attempt that holds it, and no two attempts of one run execute
at the same time. A job that watches RunContext.seconds_left() stops before its time limit and
is never ended this way. One request per instance (the stack's concurrency) means the process
ends only the overrunning attempt.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from google.api_core import exceptions as google_exceptions

from exactly_once import log_fields, structured_log
from exactly_once.ledger.protocol import Claim, LeaseLost, RunLedger

# Renewals per lease: a lease survives two renewals lost in a row.
RENEWALS_PER_LEASE = 3
# The watchdog gives up this share of a lease before an unrenewed lease could end, so the
# process is gone well before a retry can take the run over.
SAFETY_SHARE = 1 / 6
# After a failed renewal, the next try waits at most this long.
RETRY_PAUSE_SECONDS = 1.0
# Exit status of a process ended by the watchdog (EX_SOFTWARE): visible in Cloud Run's logs.
ENDED_EXIT_STATUS = 70

# Why the watchdog ends an attempt: the `cause` of its attempt_ended log line.
TIME_LIMIT = "time_limit"
RENEWAL_FAILED = "renewal_failed"
TAKEN_OVER = "taken_over"

# What ends the attempt: in production the process; tests pass their own.
EndAttempt = Callable[[str], None]
Log = Callable[[str, str, Mapping[str, Any]], None]


def end_instance(reason: str) -> None:
    """The watchdog's last word: flush what was logged, then exit without running any more
    Python code (no finally blocks, no atexit handlers: the job's thread must not continue)."""
    del reason  # already logged with the run's fields
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(ENDED_EXIT_STATUS)


class LeaseKeeper:
    """The heartbeat and watchdog of one attempt, for the duration of a `with` block."""

    def __init__(
        self,
        ledger: RunLedger,
        claim: Claim,
        *,
        ends_at: float,
        end_attempt: EndAttempt = end_instance,
        about: Mapping[str, Any] | None = None,
        log_stream: Any = None,
    ) -> None:
        self._ledger = ledger
        self._claim = claim
        self._ends_at = ends_at
        self._end_attempt = end_attempt
        self._fields = dict(about or {})  # the run, for the watchdog's log line
        self._log_stream = log_stream
        self._lease = ledger.lease.total_seconds()
        self._done = threading.Event()
        self._ending = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name=f"lease-{claim.run_id[:12]}", daemon=True)
        self.renewals = 0

    @property
    def claim(self) -> Claim:
        """The claim as of the last confirmed renewal: what the finishing write must match."""
        return self._claim

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        with self._ending:
            self._done.set()
        self._thread.join()  # a renewal in flight finishes first: its commit moves update_time

    def _watch(self) -> None:
        interval = self._lease / RENEWALS_PER_LEASE
        while True:
            claim = self._claim
            give_up_at = claim.sent_at + self._lease * (1 - SAFETY_SHARE)
            next_at = min(claim.sent_at + interval, give_up_at, self._ends_at)
            if self._done.wait(max(0.0, next_at - time.monotonic())):
                return
            now = time.monotonic()
            if now >= self._ends_at:
                self._end(TIME_LIMIT, "the attempt reached its time limit before the job returned")
                return
            if now >= give_up_at:
                self._end(RENEWAL_FAILED, f"no lease renewal was confirmed for {now - claim.sent_at:.1f}s")
                return
            try:
                self._claim = self._ledger.renew(claim, timeout=give_up_at - now)
                self.renewals += 1
            except LeaseLost:
                self._end(TAKEN_OVER, "another attempt took the run over")
                return
            except google_exceptions.GoogleAPIError as error:
                self._fields["renewal_error"] = repr(error)
                if self._done.wait(min(RETRY_PAUSE_SECONDS, interval / 4)):
                    return

    def _end(self, cause: str, reason: str) -> None:
        with self._ending:
            if self._done.is_set():
                return  # the job returned meanwhile: nothing left to stop
            fields = {
                log_fields.EVENT: log_fields.ATTEMPT_ENDED,
                log_fields.CAUSE: cause,
                "reason": reason,
                "renewals": self.renewals,
                **self._fields,
            }
            message = f"attempt ended: {reason}; the run is retried once its lease ends"
            structured_log.emit("CRITICAL", message, fields, self._log_stream)
            self._done.set()
            self._end_attempt(reason)
