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
- a renewal finds the run taken over. Only a lease broken from outside gets that far (the
  in-progress record deleted by hand, or by its TTL): a process frozen for longer than a
  lease finds its give-up point passed, and its backstop's timer run out, as it thaws.

The watchdog is a Python thread, so a job stuck in a C call that never releases the GIL (a
catastrophic regular expression, say) would stop it too. A backstop that needs no GIL covers
that: faulthandler's timer, a C thread that dumps every thread's traceback to stderr and
exits the process (status 1). It is armed for the latest moment the attempt may still run,
halfway past the watchdog's own deadline (the earlier of the time limit and its give-up
point) towards what must not be passed (the function timeout, the earliest end of the lease),
re-armed after each confirmed renewal and cancelled when the job returns.

So the lease always outlives the attempt that holds it, and no two attempts of one run execute
at the same time. A job that watches RunContext.seconds_left() stops before its time limit and
is never ended this way. One request per instance (the stack's concurrency) means the process
ends only the overrunning attempt, and that the process's one backstop timer is that attempt's.
"""

from __future__ import annotations

import contextvars
import faulthandler
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Protocol

from exactly_once import log_fields, structured_log
from exactly_once.config import RENEWALS_PER_LEASE, TIME_LIMIT_MARGIN_SECONDS
from exactly_once.errors import error_text
from exactly_once.ledger.protocol import Claim, LeaseLost, RunLedger

# The watchdog gives up this share of a lease before an unrenewed lease could end, so the
# process is gone well before a retry can take the run over.
SAFETY_SHARE = 1 / 6
# How long the end of an attempt waits for a renewal in flight: a Firestore answering in
# time saves the finishing write a refusal and a second try; a slow one must not hold it.
RENEWAL_WAIT_SECONDS = 1.0
# After a failed renewal, the next try waits at most this long.
RETRY_PAUSE_SECONDS = 1.0
# Exit status of a process ended by the watchdog (EX_SOFTWARE): visible in Cloud Run's logs.
ENDED_EXIT_STATUS = 70

# Why the watchdog ends an attempt: the `cause` of its attempt_ended log line.
TIME_LIMIT = "time_limit"
RENEWAL_FAILED = "renewal_failed"
TAKEN_OVER = "taken_over"
WATCHER_FAILED = "watcher_failed"

# What ends the attempt: in production the process; tests pass their own.
EndAttempt = Callable[[str], None]
Log = Callable[[str, str, Mapping[str, Any]], None]


def give_up_at(claim: Claim, lease_seconds: float) -> float:
    """When an attempt stops relying on its claim or last renewal (monotonic, like
    `claim.sent_at`): SAFETY_SHARE of the lease before the earliest moment it may end. The
    watcher ends an attempt still running then; nothing starts the job past it."""
    return claim.sent_at + lease_seconds * (1 - SAFETY_SHARE)


def end_instance(reason: str) -> None:
    """The watchdog's last word: flush what was logged, then exit without running any more
    Python code (no finally blocks, no atexit handlers: the job's thread must not continue)."""
    del reason  # already logged with the run's fields
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(ENDED_EXIT_STATUS)


# faulthandler's own functions, kept before the guard below replaces the module's names.
_DUMP_LATER = faulthandler.dump_traceback_later
_CANCEL_DUMP = faulthandler.cancel_dump_traceback_later
# Backstops with an attempt's deadline set: while there is one, the timer is theirs.
_ARMED: set[Backstop] = set()
_ARMED_LOCK = threading.Lock()
# The `event` of the warning a job's call to faulthandler's timer leaves.
BACKSTOP_KEPT = "backstop_kept"


class Backstop:
    """The process's faulthandler timer, armed for the earliest deadline among the attempts
    running in it: faulthandler keeps one timer per process, and an attempt that overstays
    ends the process whichever attempt armed it. The stack runs one request per instance,
    so that deadline is the running attempt's own.

    Anyone else's call to faulthandler.dump_traceback_later or cancel_dump_traceback_later
    (a job's, a library's) would re-arm or disarm that timer without a word. While an attempt
    has it armed, such a call is refused with a WARNING line instead (`_guard`); with none,
    it goes through as it would without this module."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deadlines: dict[object, float] = {}

    def arm(self, attempt: object, at: float) -> None:
        """End the process at time.monotonic() == `at` unless cancelled or armed again."""
        _guard()
        with self._lock:
            self._deadlines[attempt] = at
            self._set_timer()

    def cancel(self, attempt: object) -> None:
        with self._lock:
            self._deadlines.pop(attempt, None)
            self._set_timer()

    def _set_timer(self) -> None:
        with _ARMED_LOCK:
            if not self._deadlines:
                _ARMED.discard(self)
                _CANCEL_DUMP()
                return
            _ARMED.add(self)
            seconds = max(min(self._deadlines.values()) - time.monotonic(), 0.001)
            _DUMP_LATER(seconds, exit=True)


def _guard() -> None:
    """Put the guarded functions in faulthandler's place, once."""
    if faulthandler.dump_traceback_later is not _guarded_dump_later:
        faulthandler.dump_traceback_later = _guarded_dump_later
        faulthandler.cancel_dump_traceback_later = _guarded_cancel_dump


def _guarded_dump_later(timeout: float, repeat: bool = False, file: Any = None, exit: bool = False) -> None:
    if not _refused("dump_traceback_later"):
        _DUMP_LATER(timeout, repeat=repeat, file=sys.stderr if file is None else file, exit=exit)


def _guarded_cancel_dump() -> None:
    if not _refused("cancel_dump_traceback_later"):
        _CANCEL_DUMP()


def _refused(name: str) -> bool:
    with _ARMED_LOCK:
        if not _ARMED:
            return False
    message = (
        f"faulthandler.{name} called while an attempt's backstop holds faulthandler's one timer: "
        "ignored, the backstop stays armed"
    )
    structured_log.emit("WARNING", message, {log_fields.EVENT: BACKSTOP_KEPT, "call": name})
    return True


_BACKSTOP = Backstop()


class Watched(Protocol):
    """What a watcher runs: LeaseKeeper.watch, until the attempt ends."""

    def watch(self) -> None: ...


class Watchers:
    """Threads that watch attempts, each kept for the next attempt once its own has ended.

    Starting a thread waits until the new thread first runs, which on a busy instance can
    take longer than a Firestore round trip; a delivery pays that only when every watcher is
    busy (a first request, or more concurrent attempts than ever before). Never bounded: an
    attempt that waited for a free watcher would run without its lease kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[tuple[contextvars.Context, Watched]]] = []
        self._started = 0

    @property
    def idle(self) -> int:
        """Watchers waiting for an attempt."""
        with self._lock:
            return len(self._idle)

    def watch(self, keeper: Watched) -> None:
        """Watch `keeper` on a thread of its own, in the caller's context: the watchdog's
        lines carry the delivery's trace and labels like the delivery's own."""
        context = contextvars.copy_context()
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self._started += 1
                number = self._started
        if inbox is None:
            inbox = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._serve, args=(inbox,), name=f"lease-watch-{number}", daemon=True
            )
            thread.start()
        inbox.put((context, keeper))

    def _serve(self, inbox: queue.SimpleQueue[tuple[contextvars.Context, Watched]]) -> None:
        while True:
            context, keeper = inbox.get()
            context.run(keeper.watch)
            with self._lock:
                self._idle.append(inbox)


_WATCHERS = Watchers()


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
        checkpoint: Callable[[], str | None] | None = None,
    ) -> None:
        """`checkpoint` reads the job's latest checkpoint (JSON text): a renewal carries it
        when it differs from what the record already holds, in the renewal's own write."""
        self._ledger = ledger
        self._claim = claim
        self._checkpoint = checkpoint
        # The checkpoint the record holds as of the last confirmed renewal (or the claim).
        self._renewed_checkpoint = claim.checkpoint_json
        self._ends_at = ends_at
        self._end_attempt = end_attempt
        self._fields = dict(about or {})  # the run, for the watchdog's log line
        self._log_stream = log_stream
        self._lease = ledger.lease.total_seconds()
        # Only an attempt that is ended with its process may arm a timer that ends the
        # process: tests that end attempts their own way keep theirs.
        self._backstop = _BACKSTOP if end_attempt is end_instance else None
        self._done = threading.Event()
        self._ending = threading.Lock()
        # Held while the watcher decides to renew and renews: the attempt's end waits a
        # little for a renewal in flight (RENEWAL_WAIT_SECONDS), never for the thread.
        self._renewing = threading.Lock()
        self.renewals = 0

    @property
    def claim(self) -> Claim:
        """The claim as of the last confirmed renewal: what the finishing write must match."""
        return self._claim

    def __enter__(self) -> LeaseKeeper:
        self._arm_backstop()
        _WATCHERS.watch(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """The job has returned: nothing is ended after this, and no renewal starts. A
        renewal in flight is waited for RENEWAL_WAIT_SECONDS at most: answered by then, its
        commit is what the finishing write is conditioned on, and that write goes through at
        once. A slower one is not waited for: the finishing write, conditioned on the claim as
        of the last confirmed renewal, is refused if that renewal commits first, and then
        finds the record still ours and is sent again (ledger.RunLedger._write_as_owner); if
        the finishing write commits first, the renewal is refused and ends nothing."""
        with self._ending:
            self._done.set()
            if self._backstop is not None:
                self._backstop.cancel(self)
        if self._renewing.acquire(timeout=RENEWAL_WAIT_SECONDS):
            self._renewing.release()

    def _give_up_at(self, claim: Claim) -> float:
        return give_up_at(claim, self._lease)

    def _arm_backstop(self) -> None:
        """For halfway between the watchdog's deadline and the moment that must not be passed:
        the function timeout after the time limit, the lease's earliest end after the give-up
        point (sent_at + lease: the claim or renewal committed after it was sent). Never once
        the job has returned: a renewal confirmed after that must not arm a timer that would
        end the process under a later request."""
        if self._backstop is None:
            return
        at = min(
            self._ends_at + TIME_LIMIT_MARGIN_SECONDS / 2,
            self._give_up_at(self._claim) + self._lease * SAFETY_SHARE / 2,
        )
        with self._ending:
            if not self._done.is_set():
                self._backstop.arm(self, at)

    def watch(self) -> None:
        """Renew every third of a lease until the attempt ends; end it when it must. Should
        the watcher itself fail, the attempt is ended: a watcher that died silently would
        keep neither the lease nor the time limit."""
        try:
            self._watch()
        except BaseException as error:
            self._failed(error)

    def _watch(self) -> None:
        interval = self._lease / RENEWALS_PER_LEASE
        while True:
            claim = self._claim
            give_up_at = self._give_up_at(claim)
            next_at = min(claim.sent_at + interval, give_up_at, self._ends_at)
            if self._done.wait(max(0.0, next_at - time.monotonic())):
                return
            with self._renewing:
                if self._done.is_set():
                    return
                pause = self._renew_or_end(claim, give_up_at)
            if pause is None:
                return
            if pause and self._done.wait(pause):
                return

    def _renew_or_end(self, claim: Claim, give_up_at: float) -> float | None:
        """Seconds to pause before the next round (0: none); None when the attempt has ended."""
        now = time.monotonic()
        if now >= self._ends_at:
            self._end(TIME_LIMIT, "the attempt reached its time limit before the job returned")
            return None
        if now >= give_up_at:
            self._end(RENEWAL_FAILED, f"no lease renewal was confirmed for {now - claim.sent_at:.1f}s")
            return None
        latest = self._checkpoint() if self._checkpoint is not None else None
        carried = latest if latest != self._renewed_checkpoint else None
        try:
            self._claim = self._ledger.renew(claim, timeout=give_up_at - now, checkpoint_json=carried)
        except LeaseLost:
            self._end(TAKEN_OVER, "another attempt took the run over")
            return None
        except Exception as error:  # a Google API error, or one before the RPC (credentials)
            self._fields["renewal_error"] = error_text(repr(error))
            # Never past the give-up point: the attempt is ended there, not a pause later.
            left = max(0.0, give_up_at - time.monotonic())
            return min(RETRY_PAUSE_SECONDS, self._lease / RENEWALS_PER_LEASE / 4, left)
        self.renewals += 1
        if carried is not None:
            self._renewed_checkpoint = carried
        self._arm_backstop()
        return 0.0

    def _failed(self, error: BaseException) -> None:
        self._fields["watcher_error"] = error_text(repr(error))
        self._end(WATCHER_FAILED, "the lease watcher failed")

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
