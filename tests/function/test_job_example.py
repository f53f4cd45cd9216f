"""The job of docs/jobs.md and its tests, run as written: the module in a copy of function/jobs/,
served by the deployed entry point; the documented unit and end-to-end tests run by pytest as
`make test` runs a fork's own; and the overlap policies through the deployed entry point. ruff
and mypy pass on the same three files where a fork holds them: `make check`, on the fork of
tests/test_fork_path.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from exactly_once.delivery.overlap import lock_id
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from localrun import FUNCTION_DIR
from localrun.function_log import executions
from localrun.tcp_proxy import tcp_proxy
from tests.support.demo_runs import executions as demo_executions
from tests.support.demo_runs import server_env
from tests.support.doc_examples import JOB_MODULE, SERVED_TEST, UNIT_TEST, example_source
from tests.support.job_tables import jobs_env
from tests.support.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
# The job as the dev stack would deploy it: config name nightly-report, handler jobs.my_job:run.
JOB_ID = "eos-dev_nightly-report"
TOOL_TIMEOUT_SECONDS = 600


# The fork's tests/conftest.py: the repository's fixtures, serving the fork's function/.
FORK_CONFTEST = """\
import importlib.util
from pathlib import Path

import pytest

from localrun.function_server import FunctionServer

_spec = importlib.util.spec_from_file_location("repo_conftest", REPO_CONFTEST)
_repo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_repo)
emulator_host, project, db, log_path = _repo.emulator_host, _repo.project, _repo.db, _repo.log_path
SOURCE = Path(__file__).resolve().parents[1] / "function" / "main.py"


@pytest.fixture
def function_servers(log_path):
    started = []

    def start(env, **options):
        server = FunctionServer(env, log_path, source=SOURCE, **options)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
"""


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A fork as its owner would have it after following docs/jobs.md: the repository's
    settings, function/ with jobs/my_job.py, and the two documented tests in tests/jobs/.
    Its conftest takes the repository's fixtures and serves this copy of function/."""
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    ignored = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    shutil.copytree(FUNCTION_DIR, tmp_path / "function", ignore=ignored)
    (tmp_path / "function" / JOB_MODULE).write_text(example_source(JOB_MODULE))
    (tmp_path / "tests" / "jobs").mkdir(parents=True)
    for name in (UNIT_TEST, SERVED_TEST):
        (tmp_path / name).write_text(example_source(name))
    (tmp_path / "tests" / "conftest.py").write_text(
        FORK_CONFTEST.replace("REPO_CONFTEST", repr(str(REPO_ROOT / "tests" / "conftest.py")))
    )
    return tmp_path


def headers(time: str, job: str = JOB_ID) -> dict[str, str]:
    return {JOB_NAME_HEADER: job, SCHEDULE_TIME_HEADER: time}


def post(server, time: str, body: dict[str, object] | None = None, job: str = JOB_ID) -> requests.Response:
    data = json.dumps(body).encode() if body is not None else b""
    return requests.post(server.url, headers=headers(time, job), data=data, timeout=60)


def report(db, time: str):
    return db.collection("reports").document(run_key_from_headers(headers(time)).run_id).get().to_dict()


def test_the_documented_job_runs_once_and_answers_its_output(
    fork, function_servers, emulator_host, project, db, log_path
):
    with tcp_proxy(emulator_host) as proxy:
        env = {
            **server_env(emulator_host, project),
            "FIRESTORE_EMULATOR_HOST": proxy.host,
            **jobs_env({JOB_ID: "jobs.my_job:run"}),
        }
        server = function_servers(env, source=fork / "function" / "main.py")

        first = post(server, "2026-10-16T03:00:00Z", {"region": "emea"})
        assert (first.status_code, first.json()["outcome"]) == (200, "executed")
        output = first.json()["output"]
        run_id = run_key_from_headers(headers("2026-10-16T03:00:00Z")).run_id
        assert output == {"region": "emea", "report": run_id}
        duplicate = post(server, "2026-10-16T03:00:00Z", {"region": "emea"})
        assert (duplicate.status_code, duplicate.json()["outcome"]) == (200, "duplicate_completed")
        assert duplicate.json()["output"] == output

        typo = post(server, "2026-10-17T03:00:00Z", {"regoin": "emea"})
        assert (typo.status_code, typo.json()["outcome"]) == (200, "failed_terminal")
        assert (
            post(server, "2026-10-17T03:00:00Z", {"regoin": "emea"}).json()["outcome"]
            == "duplicate_completed"
        )

        barrier = threading.Barrier(8)

        def concurrent_delivery(_: int) -> str:
            barrier.wait(timeout=30)
            return str(post(server, "2026-10-18T03:00:00Z").json()["outcome"])

        with ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = Counter(pool.map(concurrent_delivery, range(8)))
        assert outcomes["executed"] == 1, outcomes
        assert set(outcomes) <= {"executed", "in_progress", "duplicate_completed"}, outcomes
        # The job ran once, by the function's own account, and left its one report.
        assert executions(log_path, JOB_ID)["2026-10-18T03:00:00Z"] == 1
        written = report(db, "2026-10-18T03:00:00Z")
        assert written is not None and written["region"] == "emea"

        proxy.cut()  # Firestore unreachable from the function
        remembered = post(server, "2026-10-16T03:00:00Z", {"region": "emea"})
        assert (remembered.status_code, remembered.json()["outcome"]) == (200, "duplicate_completed")
        assert remembered.json()["output"] == output
        new_run = post(server, "2026-10-19T03:00:00Z")
        assert (new_run.status_code, new_run.json()["outcome"]) == (500, "store_error")

    assert executions(log_path, JOB_ID) == Counter({"2026-10-16T03:00:00Z": 1, "2026-10-18T03:00:00Z": 1})


def test_the_documented_tests_pass_in_a_fork(fork, emulator_host):
    """pytest runs the two documented tests in the fork, as `make test` would run a fork's own."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FIRESTORE_EMULATOR_HOST": emulator_host}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=fork,
        env=env,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "7 passed" in result.stdout, result.stdout[-3000:]


# --- overlap policies through handle_scheduled_job and the demo job ----------------------------

FIRST, SECOND = "2026-10-16T12:00:00Z", "2026-10-16T12:15:00Z"


OVERLAP_POLICIES = {"a": "skip", "b": "wait"}


@pytest.fixture
def overlap_server(function_servers, emulator_host, project):
    return function_servers(server_env(emulator_host, project, **jobs_env(overlap=OVERLAP_POLICIES)))


def executed_runs(db, job: str, time: str) -> int:
    return len(demo_executions(db, run_key_from_headers(headers(time, job)).run_id))


def start_long_first_run(server, db, job: str) -> threading.Thread:
    """The first run of `job`, started, and past the point where a second run could still
    overlap it unnoticed: claimed, and for a job with an overlap policy holding the job's lock
    (taken after the claim, so a claimed run alone does not hold it yet)."""
    thread = threading.Thread(target=post, args=(server, FIRST, {"sleep_seconds": 5}, job))
    thread.start()
    key = run_key_from_headers(headers(FIRST, job))
    runs = db.collection("scheduler_runs")
    wait_until(lambda: runs.document(key.run_id).get().exists, timeout=20, what=f"{job}'s first claim")
    if job in OVERLAP_POLICIES:
        lock = runs.document(lock_id(key))
        wait_until(
            lambda: (lock.get().to_dict() or {}).get("lock_run_id") == key.run_id,
            timeout=20,
            what=f"{job}'s lock held by its first run",
        )
    return thread


def test_skip_never_runs_an_overlapping_run(overlap_server, db):
    first = start_long_first_run(overlap_server, db, "a")
    skipped = post(overlap_server, SECOND, job="a")
    assert (skipped.status_code, skipped.json()["outcome"]) == (200, "overlap_skipped")
    first.join(timeout=60)
    again = post(overlap_server, SECOND, job="a")
    assert (again.status_code, again.json()["outcome"]) == (200, "overlap_skipped")
    assert (executed_runs(db, "a", FIRST), executed_runs(db, "a", SECOND)) == (1, 0)


def test_wait_retries_until_the_earlier_run_ends_then_runs_once(overlap_server, db):
    first = start_long_first_run(overlap_server, db, "b")
    waiting = post(overlap_server, SECOND, job="b")
    assert (waiting.status_code, waiting.json()["outcome"]) == (409, "overlap_wait")
    assert int(waiting.headers["Retry-After"]) >= 1
    first.join(timeout=60)
    ran = post(overlap_server, SECOND, job="b")
    assert (ran.status_code, ran.json()["outcome"]) == (200, "executed")
    assert post(overlap_server, SECOND, job="b").json()["outcome"] == "duplicate_completed"
    assert (executed_runs(db, "b", FIRST), executed_runs(db, "b", SECOND)) == (1, 1)


def test_jobs_without_a_policy_still_overlap(overlap_server, db):
    first = start_long_first_run(overlap_server, db, "c")
    overlapping = post(overlap_server, SECOND, job="c")
    assert (overlapping.status_code, overlapping.json()["outcome"]) == (200, "executed")
    first.join(timeout=60)
    assert (executed_runs(db, "c", FIRST), executed_runs(db, "c", SECOND)) == (1, 1)
