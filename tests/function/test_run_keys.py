"""A job's run key: what its run ids and status are keyed by. A job the job table gives none
keeps every id it ever had; one with a run key is keyed by it whatever its Scheduler job is
called, so a renamed job keeps its runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from exactly_once.config import JobPolicy, JobTable, JobTableError
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from exactly_once.ledger.fields import job_status_id
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.run_key import RunKey, Trigger

NOON = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


def _headers(job: str, at: str = "2026-10-16T12:00:00Z") -> dict[str, str]:
    return {
        JOB_NAME_HEADER: job,
        SCHEDULE_TIME_HEADER: at,
        PROJECT_HEADER: "my-project",
        LOCATION_HEADER: "us-central1",
    }


@pytest.mark.parametrize(
    ("key", "run_id"),
    [
        (
            RunKey("my-project", "us-central1", "eos-dev_nightly-report", NOON),
            "363d42e978d931f8cf2305575906505643f7a26c8247ea190df269968f4cd984",
        ),
        (
            RunKey("my-project", "us-central1", "eos-dev_nightly-report", NOON, Trigger.FORCED),
            "b8d2b7e26e2446c74843e57b344fe0a2af682203c9036851c61bb92059475a97",
        ),
        (
            RunKey(
                "p", "europe-west1", "eos-prod_every-5", datetime(2026, 3, 29, 1, 15, 30, 250000, tzinfo=UTC)
            ),
            "5601fbf4b8c5ceb665aa6fbefe6a9bf452c7cfbf0b99c8d82f087f0d44c921d1",
        ),
    ],
)
def test_a_job_without_a_run_key_keeps_the_run_ids_it_always_had(key: RunKey, run_id: str) -> None:
    """Pinned: these ids were computed before run keys existed. A change here would strand every
    deployed job's records, its retries' claims and its status."""
    assert key.run_id == run_id


@pytest.mark.parametrize("run_keys", [None, {}, {"eos-dev_other": "eos-dev_kept"}])
def test_a_job_the_table_gives_no_run_key_is_keyed_by_its_job_id(run_keys: dict[str, str] | None) -> None:
    """No table (a `pip install ./function` service), or a table naming other jobs only."""
    read = run_key_from_headers(_headers("eos-dev_nightly-report"), run_keys)
    assert (read.run_key, read.key_name) == (None, "eos-dev_nightly-report")
    assert read.run_id == "363d42e978d931f8cf2305575906505643f7a26c8247ea190df269968f4cd984"


def test_a_job_with_a_run_key_is_keyed_by_it_whatever_its_job_id() -> None:
    run_keys = {"eos-dev_report-b": "eos-dev_report", "eos-dev_report-a": "eos-dev_report"}
    before = run_key_from_headers(_headers("eos-dev_report-a"), run_keys)
    after = run_key_from_headers(_headers("eos-dev_report-b"), run_keys)
    # The id the run key's own name would give a job without one: keying by it is that job's id.
    plain = RunKey("my-project", "us-central1", "eos-dev_report", NOON)
    assert before.run_id == after.run_id == plain.run_id
    assert before.as_triggered(Trigger.FORCED).run_id == plain.as_triggered(Trigger.FORCED).run_id
    # The job id delivered stays the job's name: the job table's policies and the logs use it.
    assert (after.job_name, after.key_name) == ("eos-dev_report-b", "eos-dev_report")


def test_the_job_status_follows_the_run_key() -> None:
    """The status `previous()` reads: one document per run key, so a renamed job that kept its
    key reads what its runs before the rename left."""
    client = firestore.Client(project="my-project", credentials=AnonymousCredentials())
    statuses = JobStatuses(FirestoreRunStore(client, "runs"), "runs")
    keyed = RunKey("my-project", "us-central1", "eos-dev_report-b", NOON, run_key="eos-dev_report")
    assert statuses.document(keyed).id == job_status_id("my-project", "us-central1", "eos-dev_report")
    plain = RunKey("my-project", "us-central1", "eos-dev_report-b", NOON)
    assert statuses.document(plain).id == "my-project|us-central1|eos-dev_report-b"


def _table(jobs: dict[str, object]) -> JobTable:
    return JobTable.from_json(json.dumps({"jobs": jobs}), "job_table.json", 55.0)


def test_the_job_table_carries_a_run_key_only_for_a_job_that_sets_one() -> None:
    assert JobPolicy().to_json() == {}
    table = _table({"eos-dev_report-b": {"run_key": "eos-dev_report"}, "eos-dev_other": {"overlap": "skip"}})
    assert table.jobs["eos-dev_report-b"] == JobPolicy(run_key="eos-dev_report")
    assert table.jobs["eos-dev_other"].run_key is None
    assert JobTable.from_json(table.to_json(), "again", 55.0) == table


@pytest.mark.parametrize(
    ("run_key", "problem"),
    [
        ("", "'' is not a Cloud Scheduler job id"),
        ("a,b", "'a,b' is not a Cloud Scheduler job id"),
        ("a|b", "'a|b' is not a Cloud Scheduler job id"),
        (7, "7 is not a Cloud Scheduler job id"),
    ],
)
def test_a_malformed_run_key_is_refused_naming_the_job(run_key: object, problem: str) -> None:
    with pytest.raises(JobTableError) as refused:
        _table({"eos-dev_report": {"run_key": run_key}})
    assert refused.value.key == "jobs['eos-dev_report'].run_key"
    assert problem in str(refused.value)


@pytest.mark.parametrize(
    "jobs",
    [
        {"eos-dev_a": {"run_key": "eos-dev_k"}, "eos-dev_b": {"run_key": "eos-dev_k"}},
        # One job's own id is another's run key.
        {"eos-dev_a": {"overlap": "skip"}, "eos-dev_b": {"run_key": "eos-dev_a"}},
    ],
)
def test_two_jobs_keyed_alike_are_refused_naming_both(jobs: dict[str, object]) -> None:
    with pytest.raises(JobTableError) as refused:
        _table(jobs)
    assert refused.value.key == "jobs['eos-dev_b'].run_key"
    assert "of job 'eos-dev_a'" in str(refused.value)
