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
        outcome: str | None = None
        with contextlib.suppress(ValueError):
            payload = response.json()
            if isinstance(payload, dict) and isinstance(payload.get("outcome"), str):
                outcome = payload["outcome"]
        return HttpReply(response.status_code, outcome)


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


@dataclass
class RunResult:
    index: int
    job: str
    schedule_time: str
    faults: list[str]
    deliveries: list[Delivery] = field(default_factory=list)
    acknowledged: bool = False  # a 2xx reached the scheduler
    executions: int = 0  # counted in Firestore, filled in after the run settles

    @property
    def retries_exhausted(self) -> bool:
        return not self.acknowledged

    @property
    def verdict(self) -> str:
        if self.executions == 1:
            return "exactly-once"
        return "lost" if self.executions == 0 else "duplicate"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(retries_exhausted=self.retries_exhausted, verdict=self.verdict)
        return data
