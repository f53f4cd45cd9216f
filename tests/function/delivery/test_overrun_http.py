"""A job that outlives its attempt, through a real Functions Framework server: Cloud Run
answers a timed-out request but keeps running its code, so the function ends such an attempt
itself, before its lease can be taken over. No two attempts of one run ever overlap."""

from __future__ import annotations

import threading
from datetime import datetime

import requests

from infra.monitoring import log_filters
from localrun.function_server import FunctionServer
from tests.function.marked_jobs import MARKS
from tests.support.demo_runs import HEADERS, REPO_ROOT, RUN_ID, ended_lines, outcome_of, server_env
from tests.support.waiting import wait_until


def marked_server(function_servers, emulator_host, project, **extra: str):
    env = server_env(
        emulator_host,
        project,
        JOB_HANDLER="tests.function.marked_jobs:marked_sleep",
        PYTHONPATH=REPO_ROOT,
        **extra,
    )
    return function_servers(env)


def post(server: FunctionServer, seconds: float) -> requests.Response | None:
    """One delivery; None when the instance ended under it (no answer), as Scheduler sees it."""
    try:
        return requests.post(server.url, headers=HEADERS, json={"seconds": seconds}, timeout=60)
    except requests.ConnectionError:
        return None


def attempt_intervals(db) -> list[tuple[datetime, datetime]]:
    marks = [doc.to_dict() for doc in db.collection(MARKS).stream()]
    return sorted((mark["started_at"], mark.get("alive_at", mark["started_at"])) for mark in marks)


def test_an_attempt_past_its_time_limit_is_ended_before_a_retry_takes_the_run(
    function_servers, emulator_host, project, db, log_path
):
    """Scaled down: a 4 s time limit, a 6 s lease, a job of 15 s. Scheduler-like retries get
    409 while the ended attempt's lease lasts, then one takes the run over; the two attempts'
    executions never overlap."""
    server = marked_server(
        function_servers, emulator_host, project, LEASE_SECONDS="6", JOB_TIME_LIMIT_SECONDS="4"
    )
    assert post(server, 15) is None  # the instance ended the attempt: no answer
    (ended,) = ended_lines(log_path)
    assert ended["reason"] == "the attempt reached its time limit before the job returned"
    # The line the ended-attempts metric counts, with its cause and job as labels.
    entry = log_filters.log_entry(ended, "eos-handler")
    assert log_filters.ENDED_ATTEMPTS.matches(entry, "eos-handler")
    assert log_filters.ENDED_ATTEMPTS.labels_of(entry) == {"cause": "time_limit", "job": "nightly"}

    outcomes: list[str] = []

    def retried_into_a_takeover() -> bool:
        outcomes.append(outcome_of(post(server, 15)))
        return len(ended_lines(log_path)) == 2

    wait_until(retried_into_a_takeover, timeout=60, what="a retry to take the run over", interval=0.5)
    assert outcomes[0] == "in_progress" and outcomes[-1] == "no answer", outcomes
    first, second = attempt_intervals(db)
    assert first[1] < second[0], "two attempts of one run executed at the same time"
    record = db.collection("scheduler_runs").document(RUN_ID).get().to_dict()
    assert record["status"] == "in_progress" and record["lease_seconds"] == 6


def test_a_job_longer_than_its_lease_but_within_its_time_limit_runs_once(
    function_servers, emulator_host, project, db
):
    server = marked_server(function_servers, emulator_host, project, LEASE_SECONDS="6")
    outcomes: list[str] = []
    running = threading.Thread(target=lambda: outcomes.append(outcome_of(post(server, 14))))
    running.start()
    wait_until(lambda: list(db.collection(MARKS).stream()), timeout=30, what="the job to start")
    while running.is_alive():
        answer = outcome_of(post(server, 14))
        if answer != "in_progress":
            # Only once the run's completion has committed, before its own answer reached the
            # thread: a duplicate is then answered from the completed record.
            assert answer == "duplicate_completed", answer
            assert db.collection("scheduler_runs").document(RUN_ID).get().to_dict()["status"] == "completed"
        running.join(timeout=1.0)
    assert outcomes == ["executed"]
    assert len(attempt_intervals(db)) == 1
    assert outcome_of(post(server, 14)) == "duplicate_completed"
