"""Which endpoints may be reached without credentials: loopback only, i.e. tests.

Both proxy jobs can be pointed at a local fake. Anonymous or plaintext access is allowed only
for a loopback host, so a misconfigured production value fails instead of silently sending
unauthenticated calls across the network.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_loopback_http_url(url: str) -> bool:
    """True for http://127.0.0.1:8080/..., http://localhost/..., http://[::1]/..."""
    parts = urlsplit(url)
    return parts.scheme == "http" and is_loopback_host(parts.hostname)
