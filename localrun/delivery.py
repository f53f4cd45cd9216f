"""What the local Cloud Scheduler sends and what it records: one HTTP attempt, and a run's report.

Kept apart from the scheduler's retry loop (localrun/scheduler.py) so tests can swap the
transport for one that times out or drops the connection, without a server.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

import requests

# --- sending ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpReply:
    status: int
    outcome: str | None  # the handler's `outcome`, when the body says
    # What the answer says about the attempt, for the report and the timeline: its id, the
    # fence of the lease it held (only an attempt that claimed the run has one), and the
    # recorded reason of a terminal failure.
    attempt_id: str = ""
    fence: int | None = None
    error: str = ""


class DeliveryTimeout(Exception):
    """No response within the attempt deadline; the target may still be working."""


class DeliveryDropped(Exception):
    """The connection failed or was cut: refused while restarting, or killed mid-request."""


class Transport(Protocol):
    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> HttpReply: ...


class RequestsTransport:
    """HTTP over loopback. `timeout` bounds the wait for the response like Scheduler's
    attempt deadline: the client stops listening, the server keeps running the job."""

    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> HttpReply:
        try:
            response = requests.post(url, headers=dict(headers), data=body, timeout=timeout)
        except requests.Timeout as error:
            raise DeliveryTimeout(str(error)) from None
        except requests.ConnectionError as error:
            raise DeliveryDropped(str(error)) from None
        payload: Any = None
        with contextlib.suppress(ValueError):
            payload = response.json()
        if not isinstance(payload, dict):
            return HttpReply(response.status_code, None)
        outcome, attempt_id, reason = (payload.get(k) for k in ("outcome", "attempt_id", "error"))
        fence = payload.get("fence")
        return HttpReply(
            response.status_code,
            outcome if isinstance(outcome, str) else None,
            attempt_id if isinstance(attempt_id, str) else "",
            fence if isinstance(fence, int) and not isinstance(fence, bool) else None,
            reason if isinstance(reason, str) else "",
        )


class Router(Protocol):
    """Where a delivery goes: the instance a request is sent to, for as long as it is in flight.

    `alone` asks for an instance with nothing else in flight and nothing else sent to it until
    it is serving afresh: for an attempt that ends its instance (a crash, or a job the
    function's watchdog ends), as in the cloud, where an instance serves one request at a time.
    `url` pins the request to that instance (a duplicate copy of an attempt sent alone)."""

    def route(self, *, alone: bool = False, url: str | None = None) -> AbstractContextManager[str]: ...


class FixedRoute:
    """Every delivery to one URL: a single server, or a fake transport in tests."""

    def __init__(self, url: str) -> None:
        self.url = url

    @contextlib.contextmanager
    def route(self, *, alone: bool = False, url: str | None = None) -> Iterator[str]:
        del alone
        yield url or self.url


# Called with the run, the URL its attempt went to and an event set when that request has
# returned; crashes that instance while the attempt is inside the job, and says whether it did.
# (deployed job id, schedule time, instance URL, run done) -> whether the instance was killed.
CrashHook = Callable[[str, datetime, str, threading.Event], bool]


# --- what happened ----------------------------------------------------------------------------


@dataclass
class Delivery:
    """One HTTP request of a run, as the report shows it."""

    attempt: int  # 1 = first attempt, 2 = first retry, ...
    copy: bool  # an injected duplicate, invisible to the scheduler's retry logic
    sent_at_s: float  # simulated seconds since the run's first attempt
    status: int | None  # None: no response (timeout, dropped connection)
    outcome: str  # the handler's outcome, or timeout / dropped / lost_ack:<outcome>
    faults: list[str] = field(default_factory=list)
    answered_at_s: float | None = None  # simulated seconds when the answer (or its absence) was known
    attempt_id: str = ""  # the function's id of the attempt, when it answered
    fence: int | None = None  # the lease's fence, when this attempt claimed the run
    # The attempt that held the run's lease when this one was turned away (409 in_progress),
    # read from the function's log line; "" when none did.
    lease_holder: str = ""
    error: str = ""  # a terminal failure's recorded reason, as answered
    # The region whose scheduler sent it, when the run is delivered in two (localrun/regions.py).
    region: str = ""


@dataclass
class RunResult:
    index: int
    job: str
    schedule_time: str
    faults: list[str]
    deliveries: list[Delivery] = field(default_factory=list)
    acknowledged: bool = False  # a 2xx reached the scheduler
    # Filled in after the runs settle (localrun/verdicts.py): how often the job ran to its end
    # (a terminal failure included), what that came to, and why, when it was not a success.
    executions: int = 0
    verdict: str = ""
    reason: str = ""
    # The regions whose function ran the job to its end, one entry per execution (two regions).
    executed_in: list[str] = field(default_factory=list)

    @property
    def retries_exhausted(self) -> bool:
        return not self.acknowledged

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(retries_exhausted=self.retries_exhausted)
        return data
