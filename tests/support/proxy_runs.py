"""Deliveries of one scheduled run to a real function server, for the proxy job tests: the
same run as the demo job's HTTP tests (tests/support/demo_runs.py), served by a proxy job."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

from exactly_once.delivery.request_checks import CACHE_CONTROL_HEADER, NO_CACHE
from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER
from localrun.function_server import FunctionServer
from tests.support.demo_runs import HEADERS, RUN_ID, run_record
from tests.support.job_tables import jobs_env

__all__ = ["HEADERS", "JOB_NAME", "RUN_ID", "concurrent", "deliver", "proxy_env", "redo", "run_record"]

JOB_NAME = HEADERS[JOB_NAME_HEADER]


def proxy_env(emulator_host: str, project: str, handler: str, **extra: str) -> dict[str, str]:
    """The real function's environment, with `handler` selected for JOB_NAME by the job table."""
    return {
        "FIRESTORE_EMULATOR_HOST": emulator_host,
        "GOOGLE_CLOUD_PROJECT": project,
        "JOB_HANDLER": "jobs.noop:do_nothing",
        **jobs_env({JOB_NAME: handler}),
        "THREADS": "48",
        **extra,
    }


def deliver(server: FunctionServer, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url, headers=HEADERS, data=json.dumps(body).encode(), timeout=60)


def redo(server: FunctionServer, body: dict[str, Any]) -> requests.Response:
    """The delivery `ops redo` sends once it has deleted the run's record: the same run, as
    no-cache, so that no instance answers it from memory."""
    headers = {**HEADERS, CACHE_CONTROL_HEADER: NO_CACHE}
    return requests.post(server.url, headers=headers, data=json.dumps(body).encode(), timeout=60)


def concurrent(count: int, call: Callable[[int], Any]) -> list[Any]:
    """`count` calls released together by a barrier, so they really overlap."""
    barrier = threading.Barrier(count)

    def one(index: int) -> Any:
        barrier.wait(timeout=30)
        return call(index)

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))
