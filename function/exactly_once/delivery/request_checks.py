"""What a delivery's HTTP framing says before its run is looked at: a body cut short, and a
caller who asks for the ledger's answer rather than an instance's memory.
"""

from __future__ import annotations

from collections.abc import Mapping

CONTENT_LENGTH_HEADER = "Content-Length"
CACHE_CONTROL_HEADER = "Cache-Control"
# The HTTP way to say "ask the origin, not a cache" (RFC 9111, section 5.2.1.4).
NO_CACHE = "no-cache"


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """Look a header up case-insensitively: HTTP/2 (Cloud Run) lower-cases names and
    HTTP/1.1 proxies may re-case them."""
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), None)


def body_problem(headers: Mapping[str, str], body: bytes | None) -> str | None:
    """Why the body cannot be the one the caller sent, or None.

    A connection that breaks off mid-body leaves the server with fewer bytes than the
    Content-Length it announced. Deciding the run on those bytes would record a run that no
    scheduler asked for (partial JSON as a terminal failure, an empty body as a run with
    defaults), and every full retry would then be answered from that record."""
    if body is None:
        return "the request body could not be read (the connection broke off)"
    declared = header_value(headers, CONTENT_LENGTH_HEADER)
    if declared is None:
        return None  # chunked: the server reads to the final chunk or fails the read
    if not declared.strip().isdecimal() or not declared.strip().isascii():
        return f"{CONTENT_LENGTH_HEADER} {declared[:40]!r} is not a number of bytes"
    expected = int(declared.strip())
    if len(body) < expected:
        return f"the body ended after {len(body)} of its {expected} bytes ({CONTENT_LENGTH_HEADER})"
    return None


def wants_fresh_answer(headers: Mapping[str, str]) -> bool:
    """True when the delivery says `Cache-Control: no-cache`: a redo after an operator deleted
    a run's record must be decided by the ledger, never by an instance that remembers the run
    as completed. Cloud Scheduler's own retries do not send it and keep the 0-RPC answer."""
    value = header_value(headers, CACHE_CONTROL_HEADER) or ""
    directives = (part.strip().lower() for part in value.split(","))
    return any(directive == NO_CACHE or directive.startswith(NO_CACHE + "=") for directive in directives)
