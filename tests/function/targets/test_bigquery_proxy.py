"""The BigQuery proxy end to end: real function server, emulator, loopback BigQuery API
speaking google-cloud-bigquery's REST wire protocol. What it shares with the other proxies is
in test_proxy_conformance.py; here, what only it does: the job id derived from the run, the
query job's configuration, and a job that BigQuery accepted but could not run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exactly_once.targets.bigquery_job_spec import BIGQUERY_JOBS_ENV
from tests.function.targets.proxy_kinds import BIGQUERY_HANDLER, QUERY, QUERY_JOB
from tests.function.targets.proxy_kinds import BIGQUERY_JOB_ID as JOB_ID
from tests.function.targets.proxy_kinds import BIGQUERY_OUTPUT_NAME as OUTPUT_NAME
from tests.support.fake_bigquery import FakeBigQuery
from tests.support.proxy_runs import JOB_NAME, RUN_ID, deliver, proxy_env, redo, run_record


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


def test_the_job_id_is_derived_from_the_run_id_and_the_job_carries_the_query(start_server, fake):
    assert f"{JOB_NAME}_{RUN_ID}" == JOB_ID
    server = start_server()
    first = deliver(server, {})
    assert (first.status_code, first.json()["outcome"]) == (200, "executed"), first.json()
    assert first.json()["output"] == {"job": OUTPUT_NAME, "state": "RUNNING", "reused": False}
    assert len(fake.calls) == 1

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


def test_a_409_whose_job_is_not_readable_yet_is_retried(start_server, fake, db):
    """BigQuery can refuse the id (409) and answer 404 for it a moment later."""
    fake.failures.extend([("lost", 503), None, 404])
    server = start_server()
    assert deliver(server, {}).json()["outcome"] == "failed_released"
    assert deliver(server, {}).json()["outcome"] == "failed_released"
    assert not run_record(db).exists
    assert deliver(server, {}).json()["outcome"] == "executed"
    assert len(fake.created()) == 1


def test_a_bad_query_is_terminal(start_server, fake, db):
    server = start_server({**QUERY_JOB, "query": "SELEC 1"})
    reply = deliver(server, {})
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    assert "invalidQuery" in run_record(db).to_dict()["error"]
    assert deliver(server, {}).json()["outcome"] == "duplicate_completed"
    assert len(fake.inserts) == 1


def test_a_redo_of_a_failed_run_finds_the_same_failed_job_and_fails_again(start_server, fake, db):
    """`ops redo` deletes the record and delivers the run again: same run id, same job id,
    refused as taken; the job read back is the failed one, so the run fails terminally again."""
    server = start_server({**QUERY_JOB, "query": "SELEC 1"})
    assert deliver(server, {}).json()["outcome"] == "failed_terminal"
    run_record(db).reference.delete()
    redone = redo(server, {})
    assert (redone.status_code, redone.json()["outcome"]) == (200, "failed_terminal")
    assert f"BigQuery job {OUTPUT_NAME} failed: invalidQuery" in run_record(db).to_dict()["error"]
    assert len(fake.created()) == 1 and len(fake.inserts) == 2
