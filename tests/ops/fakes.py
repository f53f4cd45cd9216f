"""Loopback fakes of the two Google APIs `ops smoke` calls, speaking the REST protocol their
official clients' REST transport speaks, and of a function that records what it was sent.

- Cloud Scheduler: `POST /v1/projects/P/locations/L/jobs/J:run` answers the Job resource and
  then, like the real service, delivers the job's HTTP request to its target with the
  X-CloudScheduler headers (asynchronously: the API call does not wait for the target),
  carrying the next scheduled run's time when the job's schedule is known, as a forced run
  of the real service does.
- Firestore admin: `GET /v1/projects/P/databases/D/collectionGroups/C/fields/F` answers a
  Field resource with its ttlConfig state.

Both serve on the tests' one HTTP fake (tests/support/loopback_fake.py). Unknown resources
get Google's JSON error body with status NOT_FOUND; `errors` makes a path
answer any other Google error (a status and an ErrorInfo reason). The clients send query
parameters (`$alt=json;enum-encoding=int`): routes match the path alone.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import requests

from exactly_once.audit.schedule import following_fire_times
from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER, format_rfc3339
from tests.support.loopback_fake import HttpAnswer, HttpFake, HttpRequest

_RUN = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/jobs/[^/:]+):run$")
_FIELD = re.compile(r"^/v1/(projects/[^/]+/databases/[^/]+/collectionGroups/[^/]+/fields/[^/]+)$")


@dataclass(frozen=True)
class FakeJob:
    """A job as the Scheduler API stores it: the HTTP target it delivers to."""

    uri: str
    headers: Mapping[str, str]
    body: bytes = b""
    # The job's schedule: a forced run (RunJob) carries the next scheduled run's time, as Cloud
    # Scheduler's does; without one, the time of the call.
    schedule: str | None = None
    time_zone: str = "Etc/UTC"


@dataclass(frozen=True)
class FakeError:
    """A Google API error: HTTP status, canonical status and the ErrorInfo reason."""

    http_status: int
    status: str
    message: str
    reason: str | None = None


@dataclass
class FakeGoogleApis(HttpFake):
    jobs: dict[str, FakeJob] = field(default_factory=dict)  # by full resource name
    ttl_states: dict[str, str] = field(default_factory=dict)  # field resource name -> state
    errors: dict[str, FakeError] = field(default_factory=dict)  # resource name -> its answer
    # What each delivery got: the target's HTTP status, or the connection error's name.
    deliveries: list[int | str] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        HttpFake.__init__(self)

    @property
    def calls(self) -> list[tuple[str, str, dict[str, str]]]:
        """(method, path without the query, headers by lower-case name) of every request."""
        with self.lock:
            return [(r.method, r.path, {k.lower(): v for k, v in r.headers.items()}) for r in self.requests]

    def answer(self, request: HttpRequest, step: object) -> HttpAnswer:
        if request.method == "POST":
            match = _RUN.match(request.path)
            if match and match.group(1) in self.errors:
                return _google_error(self.errors[match.group(1)])
            job = self.jobs.get(match.group(1)) if match else None
            if match is None or job is None:
                return _error(404, "NOT_FOUND", f"Job not found: {request.path}")
            request.json()  # RunJobRequest: a JSON object
            self._deliver_later(match.group(1).rsplit("/", 1)[-1], job)
            return _json(200, {"name": match.group(1), "state": "ENABLED", "httpTarget": {"uri": job.uri}})
        if request.method == "GET":
            match = _FIELD.match(request.path)
            if match and match.group(1) in self.errors:
                return _google_error(self.errors[match.group(1)])
            state = self.ttl_states.get(match.group(1)) if match else None
            if match is None or state is None:
                return _error(404, "NOT_FOUND", f"Field not found: {request.path}")
            return _json(200, {"name": match.group(1), "ttlConfig": {"state": state}})
        return _error(404, "NOT_FOUND", f"No route: {request.method} {request.path}")

    def stop(self) -> None:
        super().stop()
        for thread in self._threads:
            thread.join(timeout=60)

    def _deliver_later(self, job_id: str, job: FakeJob) -> None:
        now = datetime.now(UTC).replace(microsecond=0)
        if job.schedule is not None:
            now = next(following_fire_times(job.schedule, ZoneInfo(job.time_zone), now))
        headers = {
            JOB_NAME_HEADER: job_id,
            SCHEDULE_TIME_HEADER: format_rfc3339(now),
            "User-Agent": "Google-Cloud-Scheduler",
            **job.headers,
        }

        def deliver() -> None:
            try:
                response = requests.post(job.uri, headers=headers, data=job.body, timeout=120)
            except requests.RequestException as error:
                self.deliveries.append(type(error).__name__)
            else:
                self.deliveries.append(response.status_code)

        thread = threading.Thread(target=deliver)
        self._threads.append(thread)
        thread.start()


def _json(status: int, body: Mapping[str, Any]) -> HttpAnswer:
    return HttpAnswer.of_json(status, body, "application/json; charset=UTF-8")


def _error(status: int, code: str, message: str) -> HttpAnswer:
    return _json(status, {"error": {"code": status, "message": message, "status": code}})


def _google_error(error: FakeError) -> HttpAnswer:
    details = []
    if error.reason is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": error.reason,
                "domain": "googleapis.com",
            }
        )
    body = {"code": error.http_status, "message": error.message, "status": error.status, "details": details}
    return _json(error.http_status, {"error": body})


@dataclass
class RecordingFunction(HttpFake):
    """A loopback stand-in for the function: records each delivery's headers and body, and
    answers as the function does for a run it executed; or, given a `page`, with that HTML page
    and `status`, as Google's front end does for a request it stops before the function."""

    status: int = 200
    page: bytes | None = None

    def __post_init__(self) -> None:
        HttpFake.__init__(self)

    @property
    def url(self) -> str:
        return f"{self.endpoint}/"

    @property
    def deliveries(self) -> list[tuple[dict[str, str], bytes]]:
        """Each delivery's headers (by lower-case name) and body."""
        with self.lock:
            return [({k.lower(): v for k, v in r.headers.items()}, r.body) for r in self.requests]

    def answer(self, request: HttpRequest, step: object) -> HttpAnswer:
        if self.page is None:
            return _json(self.status, {"outcome": "executed", "message": "the run executed"})
        return HttpAnswer(self.status, self.page, "text/html; charset=UTF-8")
