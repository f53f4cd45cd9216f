"""The BigQuery proxy end to end: real function server, emulator, loopback BigQuery API
speaking google-cloud-bigquery's REST wire protocol."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import requests

from exactly_once.delivery.request_checks import CACHE_CONTROL_HEADER, NO_CACHE
from exactly_once.targets.job_specs import BIGQUERY_HANDLER, BIGQUERY_JOBS_ENV, bigquery_job_id
from localrun.function_server import FunctionServer
from tests.support.fake_bigquery import FakeBigQuery
from tests.support.google_rest_fake import HELD
from tests.support.proxy_runs import HEADERS, JOB_NAME, RUN_ID, concurrent, deliver, proxy_env, run_record
from tests.support.proxy_time_limits import (
    SHORT_TIME_LIMIT,
    TOO_SHORT_FOR_A_CALL,
    ended_attempts,
    released_errors,
)

QUERY = "SELECT @run_id AS run_id, @schedule_time AS scheduled, COUNT(*) AS n FROM `acme-data.sales.orders`"
QUERY_JOB = {
    "project": "acme-data",
    "location": "EU",
    "query": QUERY,
    "destinationTable": "acme-data.reports.daily",
    "writeDisposition": "WRITE_APPEND",
    "labels": {"team": "reports"},
}
JOB_ID = bigquery_job_id(JOB_NAME, RUN_ID)
OUTPUT_NAME = f"acme-data:EU.{JOB_ID}"


@pytest.fixture
def fake():
    bigquery = FakeBigQuery().start()
    yield bigquery
    bigquery.stop()


@pytest.fixture
def start_server(function_servers, emulator_host, project, fake):
    def start(spec: dict[str, Any] = QUERY_JOB, **extra: str):
        table = json.dumps({JOB_NAME: spec})
        env = proxy_env(
            emulator_host,
            project,
            BIGQUERY_HANDLER,
            BIGQUERY_API_ENDPOINT=fake.endpoint,
            **{BIGQUERY_JOBS_ENV: table},
            **extra,
        )
        return function_servers(env)

    return start


def redo(server: FunctionServer) -> requests.Response:
    """The delivery `ops redo` sends once it has deleted the run's record."""
    headers = {**HEADERS, CACHE_CONTROL_HEADER: NO_CACHE}
    return requests.post(server.url, headers=headers, data=b"{}", timeout=60)


def test_the_job_id_is_derived_from_the_run_id_and_the_run_starts_one_job(start_server, fake):
    assert f"{JOB_NAME}_{RUN_ID}" == JOB_ID
    server = start_server()
    first = deliver(server, {})
    assert (first.status_code, first.json()["outcome"]) == (200, "executed"), first.json()
    assert first.json()["output"] == {"job": OUTPUT_NAME, "state": "RUNNING", "reused": False}
    again = deliver(server, {})
    assert again.json()["outcome"] == "duplicate_completed"
    assert again.json()["output"]["job"] == OUTPUT_NAME  # the duplicate's answer names the job
    assert len(fake.calls) == 1  # answered from the ledger

    (job,) = fake.created()
    assert job["jobReference"] == {"projectId": "acme-data", "jobId": JOB_ID, "location": "EU"}
    query = job["configuration"]["query"]
    assert query["query"] == QUERY and query["useLegacySql"] is False
    assert query["destinationTable"] == {"projectId": "acme-data", "datasetId": "reports", "tableId": "daily"}
    assert query["writeDisposition"] == "WRITE_APPEND"
    parameters = {p["name"]: p["parameterValue"]["value"] for p in query["queryParameters"]}
    assert parameters["run_id"] == RUN_ID and "job_name" not in parameters  # only those it names
    assert parameters["schedule_time"].startswith("2026-10-16")
    assert job["configuration"]["labels"] == {"team": "reports"}


def test_a_lost_answer_leads_to_one_job_and_the_retry_reports_its_state(start_server, fake, db):
    fake.failures.append(("lost", 503))
    server = start_server()
    lost = deliver(server, {})
    assert (lost.status_code, lost.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    retried = deliver(server, {})
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed")
    assert retried.json()["output"] == {"job": OUTPUT_NAME, "state": "RUNNING", "reused": True}
    assert len(fake.created()) == 1
    assert [insert["jobReference"]["jobId"] for insert in fake.inserts] == [JOB_ID, JOB_ID]


def test_eight_concurrent_deliveries_start_one_job(start_server, fake):
    server = start_server()
    replies = concurrent(8, lambda _: deliver(server, {}))
    outcomes = Counter(reply.json()["outcome"] for reply in replies)
    assert outcomes["executed"] == 1, outcomes
    assert {reply.status_code for reply in replies} <= {200, 409}
    assert len(fake.created()) == 1 and len(fake.inserts) == 1


def test_a_409_whose_job_is_not_readable_yet_is_retried(start_server, fake, db):
    """BigQuery can refuse the id (409) and answer 404 for it a moment later."""
    fake.failures.extend([("lost", 503), None, 404])
    server = start_server()
    assert deliver(server, {}).json()["outcome"] == "failed_released"
    assert deliver(server, {}).json()["outcome"] == "failed_released"
    assert not run_record(db).exists
    assert deliver(server, {}).json()["outcome"] == "executed"
    assert len(fake.created()) == 1


def test_unavailable_releases_the_run_for_a_retry(start_server, fake, db):
    fake.failures.append(503)
    server = start_server()
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released")
    assert fake.created() == []
    assert deliver(server, {}).json()["outcome"] == "executed"
    assert len(fake.created()) == 1


def test_a_bad_query_is_terminal(start_server, fake, db):
    server = start_server({**QUERY_JOB, "query": "SELEC 1"})
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    assert "invalidQuery" in run_record(db).to_dict()["error"]
    assert deliver(server, {}).json()["outcome"] == "duplicate_completed"
    assert len(fake.inserts) == 1


@pytest.mark.parametrize("status", [400, 403])
def test_a_refused_insert_is_terminal(start_server, fake, db, status):
    fake.failures.append(status)
    server = start_server()
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    assert str(status) in run_record(db).to_dict()["error"]
    assert fake.created() == []


def test_a_redo_of_a_failed_run_finds_the_same_failed_job_and_fails_again(start_server, fake, db):
    """`ops redo` deletes the record and delivers the run again: same run id, same job id,
    refused as taken; the job read back is the failed one, so the run fails terminally again."""
    server = start_server({**QUERY_JOB, "query": "SELEC 1"})
    assert deliver(server, {}).json()["outcome"] == "failed_terminal"
    run_record(db).reference.delete()
    redone = redo(server)
    assert (redone.status_code, redone.json()["outcome"]) == (200, "failed_terminal")
    assert f"BigQuery job {OUTPUT_NAME} failed: invalidQuery" in run_record(db).to_dict()["error"]
    assert len(fake.created()) == 1 and len(fake.inserts) == 2


def test_an_insert_held_past_the_time_limit_is_cut_short_and_the_run_released(
    start_server, fake, db, log_path
):
    """A 5 s time limit and an insert whose answer never comes: the call's timeout is what the
    attempt has left, so the attempt answers (released) rather than its instance being ended
    mid-call; the retry is refused the id and reports the one job."""
    fake.failures.append(HELD)
    server = start_server(**SHORT_TIME_LIMIT)
    held = deliver(server, {})
    assert (held.status_code, held.json()["outcome"]) == (500, "failed_released")
    (error,) = released_errors(log_path)
    assert f"starting BigQuery job {JOB_ID}" in error and "Timeout" in error, error
    assert ended_attempts(log_path) == []
    assert not run_record(db).exists
    retried = deliver(server, {})
    assert retried.json()["output"] == {"job": OUTPUT_NAME, "state": "RUNNING", "reused": True}
    assert len(fake.created()) == 1


def test_too_little_time_for_a_call_releases_the_run_and_calls_nothing(start_server, fake, db, log_path):
    server = start_server(**TOO_SHORT_FOR_A_CALL)
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released")
    assert "not called" in released_errors(log_path)[0]
    assert fake.calls == [] and not run_record(db).exists


def test_a_body_is_refused_and_calls_nothing(start_server, fake):
    server = start_server()
    assert deliver(server, {"query": "DROP TABLE x"}).json()["outcome"] == "failed_terminal"
    assert fake.calls == []
