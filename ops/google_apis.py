"""The Google APIs the CLI calls through their official clients (Cloud Scheduler, the
Firestore admin API): where they are, how a client is built for them, and what an error most
likely asks the operator to fix.

The endpoints can be pointed elsewhere (flags or environment): that is how the tests drive the
clients against loopback fakes speaking the same REST protocol.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import requests
from google.api_core import exceptions as api_exceptions
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials

from ops.context import is_loopback

SCHEDULER_ENDPOINT_ENV = "OPS_SCHEDULER_ENDPOINT"
FIRESTORE_ADMIN_ENDPOINT_ENV = "OPS_FIRESTORE_ADMIN_ENDPOINT"
SCHEDULER_API = "cloudscheduler.googleapis.com"
FIRESTORE_API = "firestore.googleapis.com"
API_TIMEOUT_SECONDS = 30.0
# What a call can fail with besides an API error: no credentials, no connection.
UNREACHABLE = (auth_exceptions.TransportError, requests.RequestException, api_exceptions.RetryError)


@dataclass(frozen=True)
class Endpoints:
    """Where the two APIs are; None: the client library's own endpoint."""

    scheduler: str | None = None
    firestore_admin: str | None = None

    @classmethod
    def from_env(cls, scheduler: str | None = None, firestore_admin: str | None = None) -> Endpoints:
        def pick(flag: str | None, variable: str) -> str | None:
            chosen = flag or os.environ.get(variable)
            return chosen.rstrip("/") if chosen else None

        return cls(
            scheduler=pick(scheduler, SCHEDULER_ENDPOINT_ENV),
            firestore_admin=pick(firestore_admin, FIRESTORE_ADMIN_ENDPOINT_ENV),
        )


def client_options(endpoint: str | None) -> dict[str, Any]:
    """How to build an official client for `endpoint`.

    Always the REST transport: the same protocol in production and against the tests' fakes,
    so the path the tests exercise is the one operators run. A loopback endpoint (a fake)
    gets anonymous credentials; any other uses Application Default Credentials, as every
    Google client does."""
    options: dict[str, Any] = {"transport": "rest"}
    if endpoint is not None:
        options["client_options"] = ClientOptions(api_endpoint=endpoint)
        if is_loopback(endpoint):
            options["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return options


NO_CREDENTIALS = "authenticate: `gcloud auth application-default login` ({error})"


def _reasons(error: api_exceptions.GoogleAPICallError) -> set[str]:
    """The ErrorInfo reasons of an error (SERVICE_DISABLED, ...). Over REST the details are
    JSON objects, over gRPC messages: read both alike."""
    reasons = set()
    for detail in error.details or ():
        reason = detail.get("reason") if isinstance(detail, dict) else getattr(detail, "reason", None)
        if isinstance(reason, str) and reason:
            reasons.add(reason)
    return reasons


def _service_disabled(error: api_exceptions.GoogleAPICallError) -> bool:
    return isinstance(error, api_exceptions.Forbidden) and (
        "SERVICE_DISABLED" in _reasons(error) or "has not been used" in error.message
    )


def caller_refused(error: api_exceptions.GoogleAPICallError) -> bool:
    """The caller's identity was refused, not the deployment found wanting: the smoke test
    could not look, which is CLOUD_UNREACHABLE and not a failed step."""
    return isinstance(error, api_exceptions.Unauthorized) or (
        isinstance(error, api_exceptions.Forbidden) and not _service_disabled(error)
    )


def likely_fix(api: str, error: api_exceptions.GoogleAPICallError) -> str:
    """The fix an operator most likely needs for a failed Google API call. REST answers map
    to the HTTP-status classes (Unauthorized, Forbidden), gRPC ones to their subclasses."""
    reasons = _reasons(error)
    text = " ".join([*sorted(reasons), error.message]).strip()
    if isinstance(error, api_exceptions.Unauthorized):
        return "authenticate: `gcloud auth application-default login`"
    if _service_disabled(error):
        return f"enable the API: `gcloud services enable {api}` (pulumi up enables it; wait a minute)"
    if isinstance(error, api_exceptions.Forbidden):
        return f"IAM: your identity lacks the permission ({text})"
    if isinstance(error, api_exceptions.NotFound):
        return "not found: is the stack deployed (`pulumi up`) and is --stack the right one?"
    return f"HTTP {error.code}: {text}"
