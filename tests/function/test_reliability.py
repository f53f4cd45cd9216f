"""What an operator would try against a real Functions Framework server: skewed instance
clocks (libfaketime), Firestore cut off (a loopback TCP proxy), hostile requests."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
import requests

from exactly_once.config import DEFAULT_LEASE_SECONDS
from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER
from localrun.emulator import EMULATOR_HOST_ENV, firestore_emulator
from localrun.tcp_proxy import tcp_proxy
from tests.support.demo_runs import HEADERS, deliver, executions, run_record, server_env
from tests.support.waiting import wait_until

# The lease a stack deploys unless its config says otherwise (the dev stack's), whose claim
# budget bounds how long a delivery waits for an unreachable Firestore. Read from the function,
# not the stack's settings: these tests also run on the runtime's Python, without the stack's
# requirements (tests/infra keeps the stack's default equal to it).
DEV_LEASE_SECONDS = f"{DEFAULT_LEASE_SECONDS:g}"
UNREACHABLE_ANSWER_SECONDS = 20.0


# --- clocks ------------------------------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("faketime") is None,
    reason="needs faketime (Debian package faketime; make test installs it as root or with sudo)",
)
@pytest.mark.parametrize(("offset", "skewed_claims_first"), [("+120s", False), ("-120s", True)])
def test_an_instance_with_a_skewed_clock_never_runs_a_live_run_again(
    function_servers, emulator_host, project, db, offset, skewed_claims_first
):
    """Two instances on one emulator, one 120 s off. Whichever claims first, the other is
    answered 409 while the run is live, then duplicate_completed: one execution."""
    env = server_env(emulator_host, project, LEASE_SECONDS="30")
    honest = function_servers(env)
    skewed = function_servers(env, launcher=("faketime", "-f", offset))
    first, second = (skewed, honest) if skewed_claims_first else (honest, skewed)

    answers: list[requests.Response] = []
    running = threading.Thread(target=lambda: answers.append(deliver(first, {"sleep_seconds": 4})))
    running.start()
    wait_until(lambda: run_record(db).exists, timeout=20, what="the first instance's claim")
    blocked = deliver(second)
    running.join(timeout=60)

    assert (blocked.status_code, blocked.json()["outcome"]) == (409, "in_progress")
    assert 1 <= int(blocked.headers["Retry-After"]) <= 30
    assert answers[0].json()["outcome"] == "executed"
    again = deliver(second)
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")
    assert len(executions(db)) == 1


# --- Firestore unreachable -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_firestore_unreachable_is_answered_500_store_error_in_bounded_time(
    function_servers, emulator_host, project, db, mode
):
    with tcp_proxy(emulator_host) as proxy:
        env = server_env(emulator_host, project, LEASE_SECONDS=DEV_LEASE_SECONDS)
        server = function_servers({**env, "FIRESTORE_EMULATOR_HOST": proxy.host})
        assert deliver(server).json()["outcome"] == "executed"  # the channel is up and used

        proxy.cut(mode)
        later = {**HEADERS, SCHEDULE_TIME_HEADER: "2026-10-16T12:15:00Z"}
        started = time.monotonic()
        reply = requests.post(server.url, headers=later, timeout=60)
        elapsed = time.monotonic() - started

        assert (reply.status_code, reply.json()["outcome"]) == (500, "store_error")
        assert elapsed < UNREACHABLE_ANSWER_SECONDS, elapsed

        proxy.restore()

        def answered_200() -> requests.Response | None:
            response = requests.post(server.url, headers=later, timeout=60)
            return response if response.status_code == 200 else None

        recovered = wait_until(answered_200, timeout=60, what="Firestore to be reachable again", interval=0.5)
        assert recovered.json()["outcome"] == "executed"


def test_emulator_stopped_new_runs_fail_fast_and_completed_ones_are_still_answered(
    function_servers, tmp_path, monkeypatch
):
    """A private emulator, really stopped: the new run is 500 store_error within the bound,
    and a duplicate of the run this instance completed is answered from memory."""
    monkeypatch.delenv(EMULATOR_HOST_ENV, raising=False)
    with firestore_emulator(log_dir=tmp_path) as host:
        env = server_env(host, "stopped-emulator", LEASE_SECONDS=DEV_LEASE_SECONDS)
        server = function_servers(env)
        executed = deliver(server)
        assert executed.json()["outcome"] == "executed"

    later = {**HEADERS, SCHEDULE_TIME_HEADER: "2026-10-16T12:15:00Z"}
    started = time.monotonic()
    reply = requests.post(server.url, headers=later, timeout=60)
    assert (reply.status_code, reply.json()["outcome"]) == (500, "store_error")
    assert time.monotonic() - started < UNREACHABLE_ANSWER_SECONDS
    duplicate = deliver(server)
    assert (duplicate.status_code, duplicate.json()["outcome"]) == (200, "duplicate_completed")
    assert duplicate.json()["output"] == executed.json()["output"]


# --- hostile requests ------------------------------------------------------------------------


@pytest.fixture
def server(function_servers, emulator_host, project):
    return function_servers(server_env(emulator_host, project))


def nothing_happened(db) -> bool:
    return not list(db.collection("scheduler_runs").stream()) and executions(db) == []


@pytest.mark.parametrize("schedule_time", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_schedule_times_overflowing_utc_are_400(server, db, schedule_time):
    reply = deliver(server, headers={**HEADERS, SCHEDULE_TIME_HEADER: schedule_time})
    assert (reply.status_code, reply.json()["outcome"]) == (400, "bad_request")
    assert nothing_happened(db)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
def test_only_post_runs_the_job(server, db, method):
    reply = requests.request(method, server.url, headers=HEADERS, timeout=30)
    assert reply.status_code == 405
    if method != "HEAD":
        assert reply.json()["outcome"] == "method_not_allowed"
    assert nothing_happened(db)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"sleep_seconds": 1e308}',
        b'{"sleep_seconds": 1e400}',
        b'{"sleep_seconds": NaN}',
        b'{"sleep_seconds": -Infinity}',
        b'{"sleep_seconds": ' + b"9" * 5000 + b"}",
        b"[" * 30_000 + b"]" * 30_000,  # deep enough to break a recursive parser, under 64 KiB
        b'{"sleep_second": 30}',
        b'{"fail": "yes"}',
    ],
    ids=["huge", "overflow", "nan", "-inf", "5000-digits", "deep", "misspelt", "wrong-type"],
)
def test_demo_job_bodies_that_cannot_be_right_are_terminal_and_never_run(server, db, raw):
    reply = requests.post(server.url, headers=HEADERS, data=raw, timeout=30)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal"), reply.text
    assert run_record(db).to_dict()["result"] == "terminal_failure"
    assert executions(db) == []
    again = requests.post(server.url, headers=HEADERS, data=raw, timeout=30)
    assert again.json()["outcome"] == "duplicate_completed"  # recorded: no retry loop


def test_a_body_over_the_limit_is_413_before_anything_is_written(server, db):
    reply = requests.post(server.url, headers=HEADERS, data=b" " * (1024 * 1024), timeout=30)
    assert (reply.status_code, reply.json()["outcome"]) == (413, "body_too_large")
    assert nothing_happened(db)


def test_every_answer_is_json_with_a_log_line(server, log_path):
    requests.get(server.url, timeout=30)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    assert lines[-1]["outcome"] == "method_not_allowed"
