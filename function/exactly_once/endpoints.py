"""Where a proxy job's Google API client connects: the library's endpoint, another one, or a
local fake. One reading for every target (Workflows, Cloud Run, BigQuery).

`<VARIABLE>` empty: the library's default endpoint. `host[:port]` or `https://host[:port]`:
TLS and Application Default Credentials (a regional or private endpoint). `http://<loopback>:port`:
plaintext with no credentials, for tests only; any other `http://` host is refused, so a
misconfigured production value stops the instance instead of sending unauthenticated calls
across the network. A plaintext endpoint is announced on stderr when the job module loads.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from exactly_once import structured_log
from exactly_once.config import ConfigError
from exactly_once.loopback import is_loopback_host

WORKFLOWS_ENDPOINT_ENV = "WORKFLOWS_API_ENDPOINT"
CLOUD_RUN_ENDPOINT_ENV = "CLOUD_RUN_API_ENDPOINT"
BIGQUERY_ENDPOINT_ENV = "BIGQUERY_API_ENDPOINT"
# The missed-run audit's catch-up deliveries (exactly_once/audit/redelivery.py).
CLOUD_TASKS_ENDPOINT_ENV = "CLOUD_TASKS_API_ENDPOINT"
# Every endpoint switch of the shipped proxy jobs and the audit; the policy pack refuses a
# plaintext one in a deployed function.
ENDPOINT_VARIABLES: Final = (
    WORKFLOWS_ENDPOINT_ENV,
    CLOUD_RUN_ENDPOINT_ENV,
    BIGQUERY_ENDPOINT_ENV,
    CLOUD_TASKS_ENDPOINT_ENV,
)
# The downstream HTTP proxy's switch that sends no ID token, to a loopback server only (tests).
ID_TOKEN_DISABLED_ENV = "DOWNSTREAM_ID_TOKEN_DISABLED"


@dataclass(frozen=True)
class ApiEndpoint:
    """`host` None: the library's default endpoint."""

    host: str | None
    plaintext: bool

    @property
    def url(self) -> str | None:
        """The endpoint as a REST client's `api_endpoint` takes it (scheme included)."""
        if self.host is None:
            return None
        return f"{'http' if self.plaintext else 'https'}://{self.host}"

    @classmethod
    def from_env(cls, env: Mapping[str, str], variable: str) -> ApiEndpoint:
        raw = env.get(variable, "").strip()
        if not raw:
            return cls(None, plaintext=False)
        parts = urlsplit(raw if "://" in raw else f"https://{raw}")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ConfigError(
                variable, f"{raw!r} is not host[:port], https://host[:port] or http://loopback:port"
            )
        if parts.scheme == "http" and not is_loopback_host(parts.hostname):
            raise ConfigError(variable, f"{raw!r}: plaintext without credentials is allowed only on loopback")
        return cls(parts.netloc, plaintext=parts.scheme == "http")


def endpoint_from_env(env: Mapping[str, str], variable: str) -> ApiEndpoint:
    """The endpoint `variable` names; a plaintext one is announced, loud on purpose: this
    mode must never go unnoticed outside tests."""
    endpoint = ApiEndpoint.from_env(env, variable)
    if endpoint.plaintext:
        message = f"{variable}={endpoint.host}: plaintext loopback endpoint, no credentials"
        structured_log.emit("WARNING", message, {}, sys.stderr)
    return endpoint
