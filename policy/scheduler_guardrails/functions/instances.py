"""one-request-per-instance: the deduplicating function serves one request per instance.

An attempt that overruns its time limit, or cannot keep its run's lease, is ended with its
process, and a process-wide backstop timer is armed for it (function/exactly_once/delivery/
heartbeat.py). Both are right only while the process serves that one attempt: with more
requests per instance, ending one attempt would end the healthy ones beside it, and their
runs would wait for their leases to end.
"""

from __future__ import annotations

from collections.abc import Iterable

from pulumi_policy import ResourceValidationArgs

from ..engine.functions import is_token_check
from ..engine.props import MISSING, UNKNOWN, as_number, lookup

CONCURRENCY = ("serviceConfig", "maxInstanceRequestConcurrency")


def check_one_request_per_instance(args: ResourceValidationArgs) -> Iterable[str]:
    """Every Cloud Functions v2 function but the token check, which ends no process."""
    if is_token_check(args.props):
        return
    concurrency = lookup(args.props, *CONCURRENCY)
    number = as_number(concurrency)
    if concurrency is UNKNOWN or number == 1:
        return
    prop = ".".join(CONCURRENCY)
    if concurrency is MISSING:
        shown = "is not set, so the platform's default applies"
    else:
        shown = f"is {number:g}" if number is not None else f"is {concurrency!r}"
    yield (
        f"Function '{args.name}': property {prop} {shown}. The function ends an attempt that "
        "overruns its time limit or cannot renew its lease by ending its instance's process, which "
        f"must then take no other request with it. Set {prop} to 1."
    )
