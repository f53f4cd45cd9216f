"""Idempotency tokens, enforced where state changes: the downstream end of the proxy.

The proxy jobs deduplicate a scheduled run, but a response lost on the way back can still
make them start the downstream step twice (two workflow executions, two HTTP calls), both
carrying the same token. The last line of defence is at the state-changing step itself:

    begin(token, fence)   -> first: do the step;  otherwise: skip it
    complete(token, holder, result)   after the step (optional: lets duplicates see it done)
    release(token, holder)            after a failed step, so a retry may do it

It is the run ledger's technique (ledger.py) on another collection: create() decides who is
first, with no transaction; later writes are conditioned on update_time and on the holder
id that begin() handed out, so only the caller that recorded the token can finish it.

Fences: a caller whose fence is lower than the recorded one belongs to an older claim of the
run and is refused as stale. A caller with an equal or higher fence is still a duplicate: the
step may already have happened, and at-most-once is what the token promises.

The token is not stored: the document id is the token itself when it is already a sha256 hex
(a run_id), else its sha256; a scope (e.g. the step's name) gives one token several steps.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import strict_json
import structured_log
from config import DEFAULT_IDEMPOTENCY_COLLECTION, ConfigError
from google.api_core import exceptions as google_exceptions
from ledger import utc_now
from run_store import MAX_STORE_DEADLINE_SECONDS, Budget, RecordExists, RunStore, StaleWrite, StoredRecord

DEFAULT_RETENTION_SECONDS = 7 * 86_400.0
MAX_TOKEN_LENGTH = 1500
MAX_SCOPE_LENGTH = 200
MAX_RESULT_BYTES = 64 * 1024
# A request is a token, a scope and at most a result: anything larger is refused unread.
MAX_TOKEN_REQUEST_BYTES = MAX_RESULT_BYTES + 4 * 1024
# Fences are commit times in nanoseconds: Firestore stores them as signed 64-bit integers.
MAX_FENCE = 2**63 - 1
_FENCE_DIGITS = re.compile(r"^[0-9]{1,19}$")
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_COLLECTION_ID = re.compile(r"^[^/]{1,1500}$")


class TokenStatus(StrEnum):
    STARTED = "started"
    COMPLETED = "completed"


class Verdict(StrEnum):
    FIRST = "first"  # recorded now: the caller performs the step
    DUPLICATE = "duplicate"  # recorded before: skip the step
    STALE_FENCE = "stale_fence"  # recorded by a newer claim than the caller's: skip, and say so


@dataclass(frozen=True)
class TokenCheck:
    verdict: Verdict
    status: TokenStatus
    recorded_fence: int | None
    holder: str | None  # only for FIRST: proves ownership to complete()/release()
    result: Any = None

    @property
    def first(self) -> bool:
        return self.verdict is Verdict.FIRST


class NotTokenHolder(Exception):
    """complete()/release() by a caller that did not record the token (or it expired)."""


class TokenContention(Exception):
    """The record kept changing under us; the caller should retry shortly."""


def token_document_id(token: str, scope: str = "") -> str:
    if not scope and _SHA256_HEX.match(token):
        return token
    return hashlib.sha256(f"{scope}\0{token}".encode()).hexdigest()


class IdempotencyTokens:
    """Token records over a RunStore (FirestoreRunStore on the tokens collection)."""

    MAX_ROUNDS = 5

    def __init__(
        self,
        store: RunStore,
        *,
        retention: timedelta,
        clock: Callable[[], datetime] = utc_now,
        new_holder: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._store = store
        self._retention = retention
        self._clock = clock
        self._new_holder = new_holder

    def begin(self, token: str, fence: int | None = None, scope: str = "") -> TokenCheck:
        doc_id = token_document_id(token, scope)
        budget = self._budget("begin")
        for _ in range(self.MAX_ROUNDS):
            now = self._clock()
            holder = self._new_holder()
            record = {
                "status": TokenStatus.STARTED.value,
                "holder": holder,
                "fence": fence,
                "scope": scope,
                "started_at": now,
                "completed_at": None,
                "result_json": None,
                "expire_at": now + self._retention,  # the TTL field
            }
            try:
                self._store.create(doc_id, record, timeout=budget.left())
                return TokenCheck(Verdict.FIRST, TokenStatus.STARTED, fence, holder)
            except RecordExists:
                pass
            stored = self._store.get(doc_id, timeout=budget.left())
            if stored is None:
                continue  # released between our create and our read
            fields = stored.fields
            if fields["expire_at"] <= stored.read_time:
                # Past retention but not yet deleted by TTL: a new use of the token.
                try:
                    self._store.update(
                        doc_id, record, if_updated_at=stored.update_time, timeout=budget.left()
                    )
                except StaleWrite:
                    continue
                return TokenCheck(Verdict.FIRST, TokenStatus.STARTED, fence, holder)
            recorded_fence = fields.get("fence")
            stale = fence is not None and recorded_fence is not None and fence < recorded_fence
            result_json = fields.get("result_json")
            return TokenCheck(
                Verdict.STALE_FENCE if stale else Verdict.DUPLICATE,
                TokenStatus(fields["status"]),
                recorded_fence,
                None,
                strict_json.loads(result_json) if result_json is not None else None,
            )
        raise TokenContention(doc_id)

    def complete(self, token: str, holder: str, result: Any = None, scope: str = "") -> None:
        """Record the step as done. Repeating it (a retried request) is harmless."""
        doc_id = token_document_id(token, scope)
        result_json = strict_json.dumps(result)
        budget = self._budget("complete")
        for _ in range(self.MAX_ROUNDS):
            stored = self._held(doc_id, holder, budget)
            if stored is None:
                raise NotTokenHolder(doc_id)
            if stored.fields["status"] == TokenStatus.COMPLETED:
                return
            fields = {
                "status": TokenStatus.COMPLETED.value,
                "completed_at": self._clock(),
                "result_json": result_json,
            }
            try:
                self._store.update(doc_id, fields, if_updated_at=stored.update_time, timeout=budget.left())
                return
            except StaleWrite:
                continue
        raise TokenContention(doc_id)

    def release(self, token: str, holder: str, scope: str = "") -> None:
        """Forget a started token after the step failed, so a retry may perform it. A
        completed token is never released: the step happened."""
        doc_id = token_document_id(token, scope)
        budget = self._budget("release")
        stored = self._held(doc_id, holder, budget)
        if stored is None or stored.fields["status"] != TokenStatus.STARTED:
            raise NotTokenHolder(doc_id)
        try:
            self._store.delete(doc_id, if_updated_at=stored.update_time, timeout=budget.left())
        except StaleWrite:
            raise NotTokenHolder(doc_id) from None

    def _budget(self, action: str) -> Budget:
        """Tokens have no lease: each action gets the ledger's longest store deadline, well
        inside the time a workflow's HTTP call waits for its answer."""
        return Budget(MAX_STORE_DEADLINE_SECONDS, f"token {action}")

    def _held(self, doc_id: str, holder: str, budget: Budget) -> StoredRecord | None:
        stored = self._store.get(doc_id, timeout=budget.left())
        if stored is None or stored.fields.get("holder") != holder:
            return None
        return stored


# --- configuration and the HTTP entry point's logic -----------------------------------


@dataclass(frozen=True)
class TokenStoreConfig:
    collection: str = DEFAULT_IDEMPOTENCY_COLLECTION
    retention_seconds: float = DEFAULT_RETENTION_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TokenStoreConfig:
        collection = env.get("IDEMPOTENCY_COLLECTION", "").strip() or DEFAULT_IDEMPOTENCY_COLLECTION
        if not _COLLECTION_ID.match(collection) or collection.startswith("__"):
            raise ConfigError("IDEMPOTENCY_COLLECTION", f"{collection!r} is not a Firestore collection id")
        raw = env.get("IDEMPOTENCY_RETENTION_SECONDS", "").strip()
        retention = DEFAULT_RETENTION_SECONDS
        if raw:
            try:
                retention = float(raw)
            except ValueError:
                raise ConfigError("IDEMPOTENCY_RETENTION_SECONDS", f"{raw!r} is not a number") from None
            if not math.isfinite(retention) or retention <= 0:
                raise ConfigError("IDEMPOTENCY_RETENTION_SECONDS", f"{raw!r} must be positive")
        return cls(collection, retention)


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
        if action != "begin" and not isinstance(holder, str):
            raise BadTokenRequest(f"{action} needs the holder that begin returned")
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
    complete/release by a non-holder; 503 a Firestore failure (http.default_retry retries it).
    """

    def __init__(
        self, tokens: IdempotencyTokens, log: Callable[[Mapping[str, Any]], None] | None = None
    ) -> None:
        self._tokens = tokens
        self._log = log or _log_line

    def handle(self, method: str, body: bytes) -> tuple[int, dict[str, Any]]:
        started = time.perf_counter()
        logged: dict[str, Any] = {}
        try:
            status, reply = self._handle(method, body)
        except Exception as error:  # a bug still answers JSON and leaves its log line
            status, reply = internal_error(error, logged)
        # The holder is a capability and the result may be large: neither is logged.
        logged.update((k, v) for k, v in reply.items() if k not in ("holder", "result"))
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        self._log({**logged, "http_status": status, "latency_ms": latency_ms})
        return status, reply

    def _handle(self, method: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if method != "POST":
            return 405, {"error": "method_not_allowed", "message": "use POST with a JSON body"}
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
        check = self._tokens.begin(request.token, request.fence, request.scope)
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
    endpoint: Callable[[], TokenCheckEndpoint], method: str, body: bytes
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
    return built.handle(method, body)


def _log_line(fields: Mapping[str, Any]) -> None:
    what = fields.get("verdict") or fields.get("status") or fields.get("error")
    severity = structured_log.severity_for_status(int(fields.get("http_status", 500)))
    structured_log.emit(severity, f"idempotency token: {what}", fields)
