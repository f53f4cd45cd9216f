"""What the loopback fakes of Google's JSON REST APIs share, on the tests' one HTTP fake
(tests/support/loopback_fake.py): JSON in and out, errors in Google's shape ({"error": {"code",
"message", "status"}}, which google-api-core turns into its exceptions), and a script of
failures for the next calls (`failures`, the fake's `script`).

A script entry is None (answer normally), an HTTP status (the call fails before anything is
created), ("lost", status): the call takes effect, then its answer is replaced by that
status, as when an answer is lost on the way back, or HELD: the call takes effect and its
answer is held until the fake stops, as from a server too slow for any client's timeout.
"""

from __future__ import annotations

from typing import Any

from tests.support.loopback_fake import HELD, Held, HttpAnswer, HttpFake, HttpRequest

__all__ = ["HELD", "ApiError", "Failure", "GoogleApiFake", "error_body"]

Failure = int | tuple[str, int] | Held | None
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


class GoogleApiFake(HttpFake):
    """What each API fake shares: its server, lifecycle and failure script. A subclass (a
    dataclass) holds the API's state and answers `_route` under `lock`."""

    def __post_init__(self) -> None:
        HttpFake.__init__(self)

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        raise NotImplementedError

    @property
    def failures(self) -> list[Failure]:
        return self.script

    @property
    def calls(self) -> list[tuple[str, str]]:
        """(method, path) of every call, in arrival order."""
        with self.lock:
            return [(request.method, request.path) for request in self.requests]

    def answer(self, request: HttpRequest, step: Failure) -> HttpAnswer:
        if isinstance(step, int):  # the call fails before anything is created
            return HttpAnswer.of_json(step, error_body(step, f"fake failure {step}"))
        with self.lock:
            try:
                answer = HttpAnswer.of_json(
                    200, self._route(request.method, request.path, dict(request.query), request.json())
                )
            except ApiError as error:
                answer = HttpAnswer.of_json(error.status, error_body(error.status, str(error), error.reason))
        if isinstance(step, tuple):  # ("lost", status): it happened, the answer is lost
            return HttpAnswer.of_json(step[1], error_body(step[1], "fake lost answer"))
        return answer
