"""The token check over HTTP: what `check_idempotency_token` (main.py) answers.

Kept free of Flask, like delivery/handler.py. The verdicts are IdempotencyTokens' (tokens.py);
this module parses and bounds requests, maps failures to statuses a caller can act on, and
logs one line per request.
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as google_exceptions

from exactly_once import strict_json, structured_log
from exactly_once.delivery.request_checks import body_problem
from exactly_once.token_check.tokens import IdempotencyTokens, NotTokenHolder, TokenContention, TokenStatus

MAX_TOKEN_LENGTH = 1500
MAX_SCOPE_LENGTH = 200
# A holder is a uuid hex, or a caller's name for its attempt (a workflow execution id).
MAX_HOLDER_LENGTH = 200
MAX_RESULT_BYTES = 64 * 1024
# A request is a token, a scope and at most a result: anything larger is refused unread.
MAX_TOKEN_REQUEST_BYTES = MAX_RESULT_BYTES + 4 * 1024
# Fences are commit times in nanoseconds, stored as Firestore's signed 64-bit integers.
MAX_FENCE = strict_json.MAX_INTEGER
_FENCE_DIGITS = re.compile(r"^[0-9]{1,19}$")


class BadTokenRequest(ValueError):
    pass


@dataclass(frozen=True)
class TokenRequest:
    action: str
    token: str
    scope: str
    fence: int | None
    holder: str | None
    result: Any

    @classmethod
    def parse(cls, body: bytes) -> TokenRequest:
        if len(body) > MAX_TOKEN_REQUEST_BYTES:
            raise BadTokenRequest(f"body exceeds {MAX_TOKEN_REQUEST_BYTES} bytes")
        try:
            parsed = strict_json.loads(body or b"null")
        except strict_json.StrictJsonError as error:
            raise BadTokenRequest(f"body must be JSON: {error}") from None
        if not isinstance(parsed, dict):
            raise BadTokenRequest("body must be a JSON object")
        action = parsed.get("action", "begin")
        if action not in ("begin", "complete", "release"):
            raise BadTokenRequest("action must be begin, complete or release")
        token = parsed.get("token")
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_LENGTH:
            raise BadTokenRequest(f"token must be a non-empty string of at most {MAX_TOKEN_LENGTH} chars")
        scope = parsed.get("scope", "")
        if not isinstance(scope, str) or len(scope) > MAX_SCOPE_LENGTH:
            raise BadTokenRequest(f"scope must be a string of at most {MAX_SCOPE_LENGTH} chars")
        holder = parsed.get("holder")
        if action != "begin" and holder is None:
            raise BadTokenRequest(f"{action} needs the holder that begin returned")
        if holder is not None and (not isinstance(holder, str) or not 0 < len(holder) <= MAX_HOLDER_LENGTH):
            raise BadTokenRequest(f"holder must be a non-empty string of at most {MAX_HOLDER_LENGTH} chars")
        result = parsed.get("result")
        if len(strict_json.dumps(result)) > MAX_RESULT_BYTES:
            raise BadTokenRequest(f"result exceeds {MAX_RESULT_BYTES} bytes of JSON")
        return cls(action, token, scope, _fence(parsed.get("fence")), holder, result)


def _fence(value: Any) -> int | None:
    # Workflows passes int64 as a number; other callers may send a decimal string.
    # Only ASCII digits: str.isdigit() also accepts "²", which int() then refuses.
    if value is None:
        return None
    if isinstance(value, str) and _FENCE_DIGITS.match(value):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_FENCE:
        return value
    raise BadTokenRequest(f"fence must be an integer from 0 to {MAX_FENCE} (or its decimal string)")


class TokenCheckEndpoint:
    """POST JSON in, (status, JSON) out; main.check_idempotency_token adapts it to Flask.

    Every verdict is 200, {"first": bool, ...}: a Workflows http.post raises on non-2xx, and
    a duplicate is an expected answer the workflow branches on, not an error. 409 means a
    complete/release by a non-holder; 503 a Firestore failure or contention, which the caller
    retries (the sample workflow's try/retry does, repeating its holder, so a begin that
    committed before its answer was lost is still its own).
    """

    def __init__(
        self, tokens: IdempotencyTokens, log: Callable[[Mapping[str, Any]], None] | None = None
    ) -> None:
        self._tokens = tokens
        self._log = log or _log_line

    def handle(
        self, method: str, body: bytes | None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """`body` is None when it could not be read; `headers` let a body shorter than its
        Content-Length be refused rather than parsed."""
        started = time.perf_counter()
        logged: dict[str, Any] = {}
        try:
            status, reply = self._handle(method, body, headers or {})
        except Exception as error:  # a bug still answers JSON and leaves its log line
            status, reply = internal_error(error, logged)
        # The holder is a capability and the result may be large: neither is logged.
        logged.update((k, v) for k, v in reply.items() if k not in ("holder", "result"))
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        self._log({**logged, "http_status": status, "latency_ms": latency_ms})
        return status, reply

    def _handle(
        self, method: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        if method != "POST":
            return 405, {"error": "method_not_allowed", "message": "use POST with a JSON body"}
        if (problem := body_problem(headers, body)) is not None:
            return 400, {"error": "bad_request", "message": problem}
        assert body is not None
        try:
            request = TokenRequest.parse(body)
        except BadTokenRequest as error:
            return 400, {"error": "bad_request", "message": str(error)}
        try:
            return self._act(request)
        except NotTokenHolder:
            return 409, {"error": "not_holder", "message": "the token is not held by this holder"}
        except TokenContention:
            return 503, {"error": "contention", "message": "the token record kept changing: retry"}
        except google_exceptions.GoogleAPIError as error:
            return 503, {"error": "store_error", "message": f"Firestore failed: {type(error).__name__}"}

    def _act(self, request: TokenRequest) -> tuple[int, dict[str, Any]]:
        if request.action == "complete":
            assert request.holder is not None
            self._tokens.complete(request.token, request.holder, request.result, request.scope)
            return 200, {"action": "complete", "status": TokenStatus.COMPLETED.value}
        if request.action == "release":
            assert request.holder is not None
            self._tokens.release(request.token, request.holder, request.scope)
            return 200, {"action": "release", "status": "released"}
        check = self._tokens.begin(request.token, request.fence, request.scope, request.holder)
        reply: dict[str, Any] = {
            "action": "begin",
            "first": check.first,
            "verdict": check.verdict.value,
            "status": check.status.value,
            "recorded_fence": check.recorded_fence,
        }
        if check.holder is not None:
            reply["holder"] = check.holder
        if check.status is TokenStatus.COMPLETED:
            reply["result"] = check.result
        return 200, reply


def internal_error(error: Exception, logged: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    logged.update(exception=repr(error), traceback=traceback.format_exc())
    return 500, {"error": "internal_error", "message": "unexpected error"}


def handle_token_request(
    endpoint: Callable[[], TokenCheckEndpoint],
    method: str,
    body: bytes | None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Build the endpoint (first request) and answer; a failure to build it is answered and
    logged like any other unexpected error."""
    try:
        built = endpoint()
    except Exception as error:
        logged: dict[str, Any] = {}
        status, reply = internal_error(error, logged)
        _log_line({**logged, **reply, "http_status": status})
        return status, reply
    return built.handle(method, body, headers)


def _log_line(fields: Mapping[str, Any]) -> None:
    what = fields.get("verdict") or fields.get("status") or fields.get("error")
    severity = structured_log.severity_for_status(int(fields.get("http_status", 500)))
    structured_log.emit(severity, f"idempotency token: {what}", fields)
