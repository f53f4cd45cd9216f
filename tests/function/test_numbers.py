"""Numbers a body or a result can carry: every one ends in a clear answer, never an overflow.

A JSON integer of 401 digits parses in Python, and float() or math.isfinite() of it raises
OverflowError: a job that checked its parameter that way answered 500 on every delivery.
strict_json refuses integers that Firestore cannot store (outside int64), so every job gets
the refusal, and the jobs' own range checks hold for any number they are handed anyway.
"""

from __future__ import annotations

import json

import pytest
import requests

from exactly_once import TerminalJobError, strict_json
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from jobs.demo import MAX_SLEEP_SECONDS, demo_parameters
from jobs.downstream_http import DownstreamRequest
from tests.support.demo_runs import HEADERS, server_env
from tests.support.instances import Instance
from tests.support.job_tables import jobs_env

DIGITS_401 = "9" * 401
INT64_RANGE = "outside the signed 64-bit range"


# --- the parser --------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [2**63 - 1, -(2**63), 0, -1])
def test_every_int64_parses_and_round_trips(number):
    assert strict_json.loads(str(number)) == number
    assert strict_json.loads(strict_json.dumps({"fence": number})) == {"fence": number}


@pytest.mark.parametrize(
    "text",
    [str(2**63), str(-(2**63) - 1), DIGITS_401, "-" + DIGITS_401, "9" * 5000],
    ids=["2^63", "-2^63-1", "401-digits", "-401-digits", "5000-digits"],
)
def test_an_integer_outside_int64_is_refused_naming_it_briefly(text):
    with pytest.raises(strict_json.StrictJsonError, match=INT64_RANGE) as refused:
        strict_json.loads(f'{{"sleep_seconds": {text}}}')
    message = str(refused.value)
    assert text[:20] in message and len(message) < 120
    if len(text) > 24:
        assert f"({len(text)} characters)" in message


@pytest.mark.parametrize("value", [2**63, {"rows": [1, {"id": -(2**63) - 1}]}, [10**400]])
def test_dumps_refuses_what_loads_would_refuse(value):
    with pytest.raises(strict_json.StrictJsonError, match=INT64_RANGE):
        strict_json.dumps(value)


# --- the jobs' own checks, handed numbers no body can carry ------------------------------------


@pytest.mark.parametrize("number", [10**400, -(10**400), float("nan"), float("inf"), 2**63])
def test_the_jobs_range_checks_hold_for_any_number(number):
    with pytest.raises(TerminalJobError, match="sleep_seconds must be a number from 0"):
        demo_parameters({"sleep_seconds": number})
    with pytest.raises(TerminalJobError, match="timeout_seconds must be in"):
        DownstreamRequest.from_body({"url": "https://service.example/apply", "timeout_seconds": number})
    assert demo_parameters({"sleep_seconds": MAX_SLEEP_SECONDS}) == (MAX_SLEEP_SECONDS, False)


# --- through the real handler ------------------------------------------------------------------

PROXIED_JOB = "proxied"


@pytest.fixture
def server(function_servers, emulator_host, project):
    handlers = jobs_env({PROXIED_JOB: "jobs.downstream_http:call_downstream"})
    env = server_env(emulator_host, project, **handlers, DOWNSTREAM_ID_TOKEN_DISABLED="1")
    return function_servers(env)


def test_a_body_number_outside_int64_is_terminal_once_then_a_duplicate(server, db):
    """The demo job's sleep and the HTTP proxy's timeout: 200 failed_terminal on the first
    delivery, recorded, and duplicate_completed after; never 500 and a retry loop."""
    cases = [
        ("nightly", f'{{"sleep_seconds": {DIGITS_401}}}'),
        ("nightly", f'{{"sleep_seconds": -{DIGITS_401}}}'),
        ("nightly", f'{{"sleep_seconds": {2**63}}}'),
        (PROXIED_JOB, f'{{"url": "http://127.0.0.1:9/apply", "timeout_seconds": {DIGITS_401}}}'),
    ]
    for day, (job, body) in enumerate(cases, start=1):
        headers = {**HEADERS, JOB_NAME_HEADER: job, SCHEDULE_TIME_HEADER: f"2026-10-{day:02d}T12:00:00Z"}
        first = requests.post(server.url, headers=headers, data=body.encode(), timeout=60)
        assert (first.status_code, first.json()["outcome"]) == (200, "failed_terminal"), first.text
        record = db.collection("scheduler_runs").document(run_key_from_headers(headers).run_id).get()
        assert record.get("result") == "terminal_failure"
        assert INT64_RANGE in record.get("error") and len(record.get("error")) < 200
        again = requests.post(server.url, headers=headers, data=body.encode(), timeout=60)
        assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")


def test_a_job_output_outside_int64_is_a_terminal_failure(emulator_host, project):
    """Stored, it could not be read back into the answer: refused before it is stored."""
    job = Instance(emulator_host, project, lambda run: {"id": 2**64})
    reply = job.deliver()
    assert (reply.status, reply.body["outcome"]) == (200, "failed_terminal")
    assert INT64_RANGE in json.loads(job.logs.getvalue().splitlines()[-1])["error"]
