"""What the loopback fakes of Google's JSON REST APIs share: a threaded HTTP server on
127.0.0.1, JSON in and out, errors in Google's shape ({"error": {"code", "message", "status"}},
which google-api-core turns into its exceptions), and a script of failures for the next calls.

A script entry is None (answer normally), an HTTP status (the call fails before anything is
created), ("lost", status): the call takes effect, then its answer is replaced by that
status, as when an answer is lost on the way back, or HELD: the call takes effect and its
answer is held until the fake stops, as from a server too slow for any client's timeout.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Literal, Self
from urllib.parse import parse_qs, urlsplit

HELD: Final = "held"
Failure = int | tuple[str, int] | Literal["held"] | None
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


class ApiError(Exception):
    """Raised by a route: answered as Google's error body with this status."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def error_body(status: int, message: str, reason: str = "") -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": status,
        "message": message,
        "status": _STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if reason:
        error["errors"] = [{"reason": reason, "message": message}]
    return {"error": error}


# A route: (method, path, query, body) -> JSON answer.
Route = Callable[[str, str, dict[str, str], Any], Any]


class GoogleRestFake:
    """Serves `route` on loopback; `failures` scripts the next calls (see the module doc)."""

    def __init__(self, route: Route) -> None:
        self.failures: list[Failure] = []
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.RLock()
        # Set when the fake stops: the held answers go out (to clients long gone).
        self._stopping = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                with fake.lock:
                    fake.calls.append((method, parts.path))
                    failure = fake.failures.pop(0) if fake.failures else None
                    status, answer = 200, None
                    if isinstance(failure, int):
                        status, answer = failure, error_body(failure, f"fake failure {failure}")
                    else:
                        try:
                            answer = route(method, parts.path, query, body)
                        except ApiError as error:
                            status, answer = error.status, error_body(error.status, str(error), error.reason)
                        if isinstance(failure, tuple):  # ("lost", status): it happened, the answer is lost
                            status, answer = failure[1], error_body(failure[1], "fake lost answer")
                if failure == HELD:
                    fake._stopping.wait()  # outside the lock: other calls are answered meanwhile
                payload = json.dumps(answer).encode()
                with contextlib.suppress(OSError):  # a held answer's client has gone
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> GoogleRestFake:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()


class GoogleApiFake:
    """What each API fake shares: its server, lifecycle and failure script. A subclass (a
    dataclass) holds the API's state and answers `_route` under `server.lock`."""

    server: GoogleRestFake

    def __post_init__(self) -> None:
        self.server = GoogleRestFake(self._route)

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    @property
    def failures(self) -> list[Failure]:
        return self.server.failures

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
