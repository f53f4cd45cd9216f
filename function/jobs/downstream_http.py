"""Proxy job: call a downstream HTTP endpoint once per scheduled run, with its token.

Deduplication here ends at the claim; a response lost on the way back from the downstream
still makes Cloud Scheduler retry. So every call carries `Idempotency-Key: <run_id>`, the
same on every retry of the run, and `X-Idempotency-Fence: <fence>`, larger for every later
claim, and the downstream enforces them (function/exactly_once/token_check/tokens.py) before changing state.

Body (set by the stack, authenticated by OIDC):
    {"url": "https://service.example/path", "payload": <any JSON>,
     "audience": "https://service.example", "timeout_seconds": 30}
Only url is required. audience defaults to the URL's scheme://host (what Cloud Run expects);
timeout_seconds defaults to 30, at most 300, and is cut to what the attempt has left. The
downstream receives a POST with JSON
    {"idempotency_key": run_id, "fence": <int>, "job_name": ..., "schedule_time": RFC 3339,
     "payload": <body.payload or null>}
and `Authorization: Bearer <Google-signed ID token for audience>`. Redirects are not followed.

Environment: DOWNSTREAM_ID_TOKEN_DISABLED=1 sends no Authorization header. For tests only:
the run fails terminally unless the URL is http on loopback. Non-loopback URLs must be https.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import google.auth.transport.requests
import requests
from google.oauth2 import id_token

from exactly_once import RunContext, TerminalJobError
from exactly_once.config import ConfigError
from exactly_once.endpoints import ID_TOKEN_DISABLED_ENV
from exactly_once.loopback import is_loopback_http_url
from exactly_once.run_key import format_rfc3339
from exactly_once.targets.call_timeout import CALL_TIMEOUT_SECONDS, call_timeout
from exactly_once.targets.errors import downstream_call, error_for_status

DEFAULT_TIMEOUT_SECONDS = CALL_TIMEOUT_SECONDS
MAX_TIMEOUT_SECONDS = 300.0
BODY_FIELDS = frozenset({"url", "payload", "audience", "timeout_seconds"})


def _id_token_disabled(env: Mapping[str, str]) -> bool:
    raw = env.get(ID_TOKEN_DISABLED_ENV, "").strip()
    if raw not in ("", "0", "1"):
        raise ConfigError(ID_TOKEN_DISABLED_ENV, f"{raw!r} must be 0 or 1")
    return raw == "1"


ID_TOKEN_DISABLED = _id_token_disabled(os.environ)

# The token source, replaceable in-process; google-auth leaves fetch_id_token untyped.
IdTokenSource = Callable[[str], str]


def _metadata_id_token(audience: str) -> str:
    # On Cloud Run the metadata server signs it for the runtime service account.
    fetch = cast(Callable[[Any, str], str], id_token.fetch_id_token)
    return fetch(google.auth.transport.requests.Request(), audience)


fetch_id_token: IdTokenSource = _metadata_id_token


@dataclass(frozen=True)
class DownstreamRequest:
    url: str
    payload: Any
    audience: str
    timeout_seconds: float

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> DownstreamRequest:
        """Validate up front: the body is the same on every retry, so a bad one is terminal."""
        url = body.get("url")
        if not isinstance(url, str):
            raise TerminalJobError("body field url must be a string")
        parts = urlsplit(url)
        if not parts.hostname or not (parts.scheme == "https" or is_loopback_http_url(url)):
            raise TerminalJobError("body field url must be an https URL (http only on loopback)")
        audience = body.get("audience", f"{parts.scheme}://{parts.netloc}")
        if not isinstance(audience, str) or not audience:
            raise TerminalJobError("body field audience must be a non-empty string")
        timeout = body.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TerminalJobError("body field timeout_seconds must be a number")
        # Comparison alone: it holds for NaN, infinities and integers of any size.
        if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
            raise TerminalJobError(f"body field timeout_seconds must be in (0, {MAX_TIMEOUT_SECONDS:g}]")
        return cls(url, body.get("payload"), audience, float(timeout))


def _authorization(request: DownstreamRequest) -> dict[str, str]:
    if ID_TOKEN_DISABLED:
        if not is_loopback_http_url(request.url):
            raise TerminalJobError(f"{ID_TOKEN_DISABLED_ENV}=1 is allowed only for loopback http URLs")
        return {}
    with downstream_call(f"fetching an ID token for {request.audience}"):
        token = fetch_id_token(request.audience)
    return {"Authorization": f"Bearer {token}"}


def call_downstream(context: RunContext) -> dict[str, int]:
    request = DownstreamRequest.from_body(context.json_body(BODY_FIELDS))
    headers = {
        "Idempotency-Key": context.run_id,
        "X-Idempotency-Fence": str(context.fence),
        **_authorization(request),
    }
    schedule_time = format_rfc3339(context.schedule_time)
    body = {
        "idempotency_key": context.run_id,
        "fence": context.fence,
        "job_name": context.job_name,
        "schedule_time": schedule_time,
        "payload": request.payload,
    }
    what = f"POST {request.url}"
    # The body's timeout, cut to what the attempt has left (exactly_once/targets/call_timeout.py).
    timeout = call_timeout(context, what, longest=request.timeout_seconds)
    with downstream_call(what):
        response = requests.post(
            request.url, json=body, headers=headers, timeout=timeout, allow_redirects=False
        )
    if not 200 <= response.status_code < 300:
        raise error_for_status(response.status_code, what, response.text[:500])
    return {"status": response.status_code}
