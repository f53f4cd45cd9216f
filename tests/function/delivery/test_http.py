"""End to end: a real Functions Framework server on loopback, the demo job, the emulator."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from exactly_once.delivery.scheduler_request import (
    SCHEDULE_TIME_HEADER,
)
from tests.support.demo_runs import HEADERS, RUN_ID, deliver, executions, run_record
from tests.support.waiting import wait_until


def test_first_delivery_runs_and_duplicates_do_not(start_server, db):
    server = start_server()
    first = deliver(server)
    assert (first.status_code, first.json()["outcome"]) == (200, "executed")
    again = deliver(server)
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")
    (execution,) = executions(db)
    assert execution["attempt_id"] == first.json()["attempt_id"]
    assert execution["fence"] == first.json()["fence"]
    assert run_record(db).to_dict()["status"] == "completed"


@pytest.mark.parametrize("case", [str.lower, str.upper, str.title])
def test_header_case_does_not_matter_on_the_wire(start_server, db, case):
    server = start_server()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    # http.client sends header names exactly as given, unlike most clients.
    connection.request("POST", "/", body=b"", headers={case(k): v for k, v in HEADERS.items()})
    response = connection.getresponse()
    assert response.status == 200, response.read()
    assert json.loads(response.read())["run_id"] == RUN_ID


def test_bad_request_is_400_naming_the_header_and_writes_nothing(start_server, db):
    server = start_server()
    headers = {**HEADERS, SCHEDULE_TIME_HEADER: "every 5 minutes"}
    response = deliver(server, headers=headers)
    assert response.status_code == 400
    assert SCHEDULE_TIME_HEADER in response.json()["message"]
    assert list(db.collection("scheduler_runs").stream()) == []


def test_burst_of_concurrent_deliveries_executes_once(start_server, db):
    server = start_server()
    barrier = threading.Barrier(32)

    def one_delivery(_: int) -> tuple[int, str]:
        barrier.wait(timeout=30)
        response = deliver(server, {"sleep_seconds": 0.5})
        return response.status_code, response.json()["outcome"]

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(one_delivery, range(32)))
    statuses = Counter(status for status, _ in results)
    outcomes = Counter(outcome for _, outcome in results)
    assert outcomes["executed"] == 1, outcomes
    assert not [s for s in statuses if s >= 500], statuses
    assert set(statuses) <= {200, 409}, statuses
    assert len(executions(db)) == 1


CRASH_LEASE_SECONDS = 15


def test_crashed_attempt_blocks_until_its_lease_expires_then_a_retry_completes_once(start_server, db):
    # Renewed every 5 s while the attempt lives, the lease has 10 s or more left when it dies,
    # more than a busy machine takes between the kill and the next delivery; the retries go to
    # an instance already serving, as starting one may take longer than that.
    server = start_server(LEASE_SECONDS=str(CRASH_LEASE_SECONDS))
    other = start_server(LEASE_SECONDS=str(CRASH_LEASE_SECONDS))
    slow = threading.Thread(target=lambda: _ignore_errors(lambda: deliver(server, {"sleep_seconds": 30})))
    slow.start()
    wait_until(lambda: run_record(db).exists, timeout=20, what="the slow attempt's claim")
    server.crash()  # SIGKILL: the attempt dies holding its lease
    slow.join(timeout=30)

    blocked = deliver(other)
    assert blocked.status_code == 409
    assert 1 <= int(blocked.headers["Retry-After"]) <= CRASH_LEASE_SECONDS

    def retry_succeeds():
        response = deliver(other)
        return response if response.status_code != 409 else None

    taken_over = wait_until(
        retry_succeeds, timeout=CRASH_LEASE_SECONDS + 30, what="the lease to expire", interval=0.25
    )
    assert (taken_over.status_code, taken_over.json()["outcome"]) == (200, "lease_taken_over")
    assert len(executions(db)) == 1
    assert deliver(other).json()["outcome"] == "duplicate_completed"


def test_failed_job_releases_the_run_and_the_next_delivery_runs_it(start_server, db):
    server = start_server()
    failed = deliver(server, {"fail": True})
    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    assert executions(db) == []
    retried = deliver(server)
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed")
    assert len(executions(db)) == 1


def test_malformed_body_is_terminal_not_retried(start_server, db):
    server = start_server()
    response = deliver(server, {"sleep_seconds": "slowly"})
    assert (response.status_code, response.json()["outcome"]) == (200, "failed_terminal")
    assert run_record(db).to_dict()["error"] == "body field sleep_seconds must be a number"
    assert executions(db) == []


def test_structured_log_lines_reach_stdout(start_server, log_path):
    server = start_server()
    deliver(server)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    assert [line["outcome"] for line in lines if "outcome" in line][-1] == "executed"


def _ignore_errors(call) -> None:
    with contextlib.suppress(requests.RequestException):  # the server was killed under it
        call()
