"""Loopback fakes of the two Google APIs `ops smoke` calls, speaking the REST protocol their
official clients' REST transport speaks, and of a function that records what it was sent.

- Cloud Scheduler: `POST /v1/projects/P/locations/L/jobs/J:run` answers the Job resource and
  then, like the real service, delivers the job's HTTP request to its target with the
  X-CloudScheduler headers (asynchronously: the API call does not wait for the target).
- Firestore admin: `GET /v1/projects/P/databases/D/collectionGroups/C/fields/F` answers a
  Field resource with its ttlConfig state.

Unknown resources get Google's JSON error body with status NOT_FOUND; `errors` makes a path
answer any other Google error (a status and an ErrorInfo reason). The clients send query
parameters (`$alt=json;enum-encoding=int`): routes match the path alone.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import requests

from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER, format_rfc3339

_RUN = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/jobs/[^/:]+):run$")
_FIELD = re.compile(r"^/v1/(projects/[^/]+/databases/[^/]+/collectionGroups/[^/]+/fields/[^/]+)$")


@dataclass(frozen=True)
class FakeJob:
    """A job as the Scheduler API stores it: the HTTP target it delivers to."""

    uri: str
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True)
class FakeError:
    """A Google API error: HTTP status, canonical status and the ErrorInfo reason."""

    http_status: int
    status: str
    message: str
    reason: str | None = None


@dataclass
class FakeGoogleApis:
    jobs: dict[str, FakeJob] = field(default_factory=dict)  # by full resource name
    ttl_states: dict[str, str] = field(default_factory=dict)  # field resource name -> state
    errors: dict[str, FakeError] = field(default_factory=dict)  # resource name -> its answer
    # (method, path without the query, headers) of every request.
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    # What each delivery got: the target's HTTP status, or the connection error's name.
    deliveries: list[int | str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeGoogleApis:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                path = fake._record(self)
                match = _RUN.match(path)
                if match and match.group(1) in fake.errors:
                    return _google_error(self, fake.errors[match.group(1)])
                job = fake.jobs.get(match.group(1)) if match else None
                if match is None or job is None:
                    return _error(self, 404, "NOT_FOUND", f"Job not found: {path}")
                length = int(self.headers.get("Content-Length") or 0)
                json.loads(self.rfile.read(length) or b"{}")  # RunJobRequest: a JSON object
                fake._deliver_later(match.group(1).rsplit("/", 1)[-1], job)
                _json(self, 200, {"name": match.group(1), "state": "ENABLED", "httpTarget": {"uri": job.uri}})

            def do_GET(self) -> None:
                path = fake._record(self)
                match = _FIELD.match(path)
                if match and match.group(1) in fake.errors:
                    return _google_error(self, fake.errors[match.group(1)])
                state = fake.ttl_states.get(match.group(1)) if match else None
                if match is None or state is None:
                    return _error(self, 404, "NOT_FOUND", f"Field not found: {path}")
                _json(self, 200, {"name": match.group(1), "ttlConfig": {"state": state}})

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=60)

    def _record(self, handler: BaseHTTPRequestHandler) -> str:
        path = urlsplit(handler.path).path
        self.requests.append((handler.command, path, {k.lower(): v for k, v in handler.headers.items()}))
        return path

    def _deliver_later(self, job_id: str, job: FakeJob) -> None:
        headers = {
            JOB_NAME_HEADER: job_id,
            SCHEDULE_TIME_HEADER: format_rfc3339(datetime.now(UTC).replace(microsecond=0)),
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


def _json(handler: BaseHTTPRequestHandler, status: int, body: Mapping[str, Any]) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json; charset=UTF-8")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _error(handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
    _json(handler, status, {"error": {"code": status, "message": message, "status": code}})


def _google_error(handler: BaseHTTPRequestHandler, error: FakeError) -> None:
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
    _json(handler, error.http_status, {"error": body})


@dataclass
class RecordingFunction:
    """A loopback stand-in for the function: records each delivery's headers and body, and
    answers as the function does for a run it executed; or, given a `page`, with that HTML page
    and `status`, as Google's front end does for a request it stops before the function."""

    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    status: int = 200
    page: bytes | None = None
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def start(self) -> RecordingFunction:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.deliveries.append((headers, self.rfile.read(length)))
                if fake.page is None:
                    _json(self, fake.status, {"outcome": "executed", "message": "the run executed"})
                    return
                self.send_response(fake.status)
                self.send_header("Content-Type", "text/html; charset=UTF-8")
                self.send_header("Content-Length", str(len(fake.page)))
                self.end_headers()
                self.wfile.write(fake.page)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
