"""Where one delivery's time goes inside the served process, measured, not estimated.

`install()` wraps the functions a delivery passes through (gunicorn's worker, Flask, the
Functions Framework's view, our view, the handler and the ledger calls it makes) with a
time.perf_counter_ns() probe each. Only the bench's probed entry point (bench/probed_main.py)
calls it: the function as deployed, and as every other bench row serves it, is never wrapped,
so the probes cost nothing when off and change no code path when on (each wrapper calls the
original and records its duration; ~1 µs of its own per call).

A request's probes add up in a record of its own (the worker thread's), started where gunicorn
hands the request to a worker thread; the time since the server's main loop queued it is
recorded too. `Records` keeps the finished ones for the bench to fetch over HTTP.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Probe names, each an inclusive duration in ns; the breakdown subtracts nested ones.
QUEUED = "queued"  # the server's main loop queued the request -> a worker thread took it
WORKER = "worker"  # gunicorn's worker thread: parse, the WSGI call, write the answer
SERVE = "serve"  # gunicorn's handle_request: environ, the WSGI call, write the answer
WSGI = "wsgi"  # the WSGI app: the framework's middleware, Flask, the framework's view
VIEW = "view"  # our Flask view (decorator.py): body, headers, handle, JSON response
READ_BODY = "read_body"
ANSWER = "answer"  # decorator.json_response: the JSON body and the Flask response
HANDLE = "handle"  # ScheduledRunHandler.handle: everything between the request and the answer
CHECKS = "checks"  # Content-Length/body, Scheduler headers, Cache-Control, the warm cache
CLAIM = "claim"
RPC_WAIT = "rpc_wait"  # gRPC's blocking unary call: the RPC sent, its answer awaited and read
CLAIM_RPC_WAIT = "claim_rpc_wait"  # the part of RPC_WAIT spent inside the claim
WATCH_START = "watch_start"  # LeaseKeeper.__enter__: backstop armed, watcher handed the attempt
JOB = "job"
WATCH_END = "watch_end"  # LeaseKeeper.__exit__: backstop cancelled, watcher released
ENCODE_OUTPUT = "encode_output"
COMPLETE = "complete"
REMEMBER = "remember"  # the warm cache's entry for the completed run
LOG_LINE = "log_line"  # structured_log.emit: JSON encoding, write, flush

# Where the probed server answers the records since the last fetch (GET).
RECORDS_PATH = "/probes"

Record = dict[str, int]
_local = threading.local()


class Records:
    """Finished records, oldest first; the bench takes them all after a round."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[Record] = []

    def add(self, record: Record) -> None:
        with self._lock:
            self._done.append(record)

    def take(self) -> list[Record]:
        with self._lock:
            done, self._done = self._done, []
        return done


RECORDS = Records()


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, adding its duration to the current request's record under `name`."""

    @functools.wraps(function)
    def probe(*args: Any, **kwargs: Any) -> Any:
        record: Record | None = getattr(_local, "record", None)
        if record is None:
            return function(*args, **kwargs)
        started = time.perf_counter_ns()
        try:
            return function(*args, **kwargs)
        finally:
            record[name] = record.get(name, 0) + time.perf_counter_ns() - started

    probe.__dict__["probed"] = name
    return probe


def _claim(claim: Callable[..., Any]) -> Callable[..., Any]:
    """RunLedger.claim: its duration, and how much of it its RPCs' answers took."""
    probed = timed(CLAIM, claim)

    @functools.wraps(claim)
    def probe(*args: Any, **kwargs: Any) -> Any:
        record: Record | None = getattr(_local, "record", None)
        if record is None:
            return claim(*args, **kwargs)
        waited = record.get(RPC_WAIT, 0)
        try:
            return probed(*args, **kwargs)
        finally:
            record[CLAIM_RPC_WAIT] = record.get(RPC_WAIT, 0) - waited

    probe.__dict__["probed"] = CLAIM
    return probe


def _worker(handle: Callable[..., Any]) -> Callable[..., Any]:
    """gunicorn's ThreadWorker.handle: one request on a worker thread, its record's span."""

    @functools.wraps(handle)
    def probe(self: Any, conn: Any) -> Any:
        started = time.perf_counter_ns()
        queued_at = getattr(conn, "_probe_queued_at", None)
        record: Record = {} if queued_at is None else {QUEUED: started - queued_at}
        _local.record = record
        try:
            return handle(self, conn)
        finally:
            _local.record = None
            record[WORKER] = time.perf_counter_ns() - started
            if WSGI in record and not getattr(_local, "fetch", False):
                RECORDS.add(record)
            _local.fetch = False

    probe.__dict__["probed"] = WORKER
    return probe


def _queue(enqueue: Callable[..., Any]) -> Callable[..., Any]:
    """gunicorn's ThreadWorker.enqueue_req, on the main loop: when the request was queued."""

    @functools.wraps(enqueue)
    def probe(self: Any, conn: Any) -> Any:
        conn._probe_queued_at = time.perf_counter_ns()
        return enqueue(self, conn)

    probe.__dict__["probed"] = QUEUED
    return probe


@dataclass(frozen=True)
class Patch:
    owner: Any
    attribute: str
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]]


def patches() -> list[Patch]:
    """What install() wraps. Imported here, not at the top: only the probed server loads them."""
    import flask
    from grpc import _channel
    from gunicorn.workers import gthread  # type: ignore[import-untyped]

    from exactly_once import decorator, structured_log
    from exactly_once.delivery import finishing, handler, heartbeat, warm_cache
    from exactly_once.ledger import protocol
    from exactly_once.router import JobRouter

    def named(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return functools.partial(timed, name)

    return [
        Patch(gthread.ThreadWorker, "enqueue_req", _queue),
        Patch(gthread.ThreadWorker, "handle", _worker),
        Patch(gthread.ThreadWorker, "handle_request", named(SERVE)),
        Patch(flask.Flask, "__call__", named(WSGI)),
        Patch(decorator, "request_body", named(READ_BODY)),
        Patch(decorator, "json_response", named(ANSWER)),
        Patch(handler.ScheduledRunHandler, "handle", named(HANDLE)),
        Patch(handler, "body_problem", named(CHECKS)),
        Patch(handler, "run_key_from_headers", named(CHECKS)),
        Patch(handler, "wants_fresh_answer", named(CHECKS)),
        Patch(warm_cache.CompletedRuns, "get", named(CHECKS)),
        Patch(protocol.RunLedger, "claim", _claim),
        Patch(_channel._UnaryUnaryMultiCallable, "_blocking", named(RPC_WAIT)),
        # A read is a unary-stream call: sent by __call__, its answers awaited by _next.
        Patch(_channel._UnaryStreamMultiCallable, "__call__", named(RPC_WAIT)),
        Patch(_channel._MultiThreadedRendezvous, "_next", named(RPC_WAIT)),
        Patch(_channel._SingleThreadedRendezvous, "_next", named(RPC_WAIT)),
        Patch(heartbeat.LeaseKeeper, "__enter__", named(WATCH_START)),
        Patch(JobRouter, "run", named(JOB)),
        Patch(heartbeat.LeaseKeeper, "__exit__", named(WATCH_END)),
        Patch(handler, "encode_output", named(ENCODE_OUTPUT)),
        Patch(protocol.RunLedger, "complete", named(COMPLETE)),
        Patch(finishing.RunFinisher, "remember", named(REMEMBER)),
        Patch(structured_log, "emit", named(LOG_LINE)),
    ]


def install() -> None:
    """Wrap every probed function, once; a name that is gone fails loudly here, so a renamed
    function cannot silently drop out of the breakdown."""
    for patch in patches():
        current = getattr(patch.owner, patch.attribute)
        if getattr(current, "probed", None) is None:
            setattr(patch.owner, patch.attribute, patch.wrap(current))


def fetching() -> list[Record]:
    """The records so far, for the request that fetches them (which is left out of them)."""
    _local.fetch = True
    return RECORDS.take()


def view(function: Callable[..., Any]) -> Callable[..., Any]:
    """Our Flask view, probed (the entry point wraps it: the decorator builds it in a closure)."""
    return timed(VIEW, function)
