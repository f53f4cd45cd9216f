"""The quick loop a fork runs on its own work, as the docs give it: `make test-jobs` (its tests,
and ruff and mypy on its files, in seconds) run in a fork that holds docs/jobs.md's first job and
its unit test, and the function served by hand (docs/local-run.md, "Serving the function by
hand") with the page's commands run as written. The served example test runs where the fork
path's tests run it (tests/test_fork_path.py), with the command `make test-jobs` runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from infra.config.paths import REPO_ROOT
from localrun.emulator import free_loopback_port
from localrun.port_holder import wait_for_own_answer
from tests.support.doc_examples import JOB_MODULE, UNIT_TEST, example_source
from tests.support.mypy_cache import seed_mypy_cache
from tools.fork_check import YOUR_CODE
from tools.pruned_checkout import copy_checkout

# Started first (tests/conftest.py): it builds a fork without tests and runs its quick loop.
pytestmark = pytest.mark.slow_module

LOCAL_RUN = REPO_ROOT / "docs" / "local-run.md"
TIMEOUT_SECONDS = 600
# The page's emulator, port and project, which the test replaces by its own.
PAGE_EMULATOR = "127.0.0.1:8081"
PAGE_PORT = "8080"
PAGE_PROJECT = "GOOGLE_CLOUD_PROJECT=local-try"
# What localrun/emulator.py runs for every emulator it starts, on a port of its choosing.
EMULATOR_COMMAND = f"gcloud emulators firestore start --host-port={PAGE_EMULATOR}"
START_TIMEOUT_SECONDS = 60.0


def _fork(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout holding docs/jobs.md's first job and no test of a fork's own, its
    `venv` the virtualenv these tests run in, its mypy starting from the test run's warm cache."""
    copy_checkout(root)
    seed_mypy_cache(root, tmp_path_factory)
    (root / "venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    for own in (root / "tests" / "jobs").glob("test_*.py"):
        own.unlink()
    (root / "function" / JOB_MODULE).write_text(example_source(JOB_MODULE), encoding="utf-8")
    return root


def _make(fork: Path, *targets: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """make in `fork`. `-o venv/.installed`: the copy shares this checkout's virtualenv, which
    make must never install into from the copy (its editable package would point at the copy)."""
    make = shutil.which("make")
    assert make, "make is not on PATH"
    environment = env or {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    return subprocess.run(
        [make, "--no-print-directory", "-o", "venv/.installed", *targets],
        cwd=fork,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def test_make_test_jobs_lints_what_make_check_lints_and_tests_tests_jobs() -> None:
    planned = _make(REPO_ROOT, "--dry-run", "test-jobs")
    assert planned.returncode == 0, planned.stderr
    for tool in ("/ruff check ", "/ruff format --check ", "/mypy "):
        (line,) = [line for line in planned.stdout.splitlines() if tool in line]
        assert line.split()[-len(YOUR_CODE) :] == list(YOUR_CODE), line
    assert re.search(r"-m pytest tests/jobs\b", planned.stdout), planned.stdout


def test_a_fork_without_tests_passes_a_unit_test_needs_no_emulator_and_a_failure_fails(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No gcloud on the PATH and no emulator named, so a run that started one would fail."""
    fork = _fork(tmp_path / "fork", tmp_path_factory)
    (tmp_path / "bin").mkdir()
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "FIRESTORE_EMULATOR_HOST")
    }
    env["PATH"] = str(tmp_path / "bin")
    empty = _make(fork, "test-jobs", env=env)
    assert empty.returncode == 0, empty.stdout[-4000:] + empty.stderr[-2000:]
    assert "tests/jobs/ holds no tests yet" in empty.stdout
    (fork / UNIT_TEST).write_text(example_source(UNIT_TEST), encoding="utf-8")
    unit = _make(fork, "test-jobs", env=env)
    assert unit.returncode == 0, unit.stdout[-4000:] + unit.stderr[-2000:]
    assert re.search(r"^tests/jobs/test_my_job\.py \.+", unit.stdout, flags=re.M), unit.stdout[-4000:]
    wrong = '"""A test that fails."""\n\n\ndef test_wrong() -> None:\n    assert sum([1, 1]) == 3\n'
    (fork / "tests" / "jobs" / "test_wrong.py").write_text(wrong)
    failing = _make(fork, "test-jobs", env=env)
    assert failing.returncode != 0 and "1 failed" in failing.stdout, failing.stdout[-4000:]


def _blocks() -> list[str]:
    """The `sh` blocks of docs/local-run.md's "Serving the function by hand", in order."""
    text = LOCAL_RUN.read_text(encoding="utf-8")
    section = text.split("\n## Serving the function by hand\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```", section, flags=re.M | re.S)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer (the function answers a GET with 405) means it serves
    except OSError:
        return False


def _replaced(text: str, page: str, ours: str) -> str:
    assert page in text, f"docs/local-run.md no longer says {page!r}: update this test"
    return text.replace(page, ours)


def test_the_function_served_by_hand_runs_a_run_once(
    emulator_host: str, project: str, tmp_path: Path
) -> None:
    """The page's three blocks: the emulator (the one this session's launcher started with the
    same command), the function served on it, and one run delivered twice with curl."""
    emulator, serve, deliver = _blocks()
    assert emulator.strip() == EMULATOR_COMMAND
    port = free_loopback_port()
    serve = _replaced(
        _replaced(serve, PAGE_EMULATOR, emulator_host), PAGE_PROJECT, f"GOOGLE_CLOUD_PROJECT={project}"
    )
    serve = _replaced(serve, f"--port={PAGE_PORT}", f"--port={port}")
    # The page's virtualenv is the one these tests run in (a copy of the checkout links none).
    serve = _replaced(serve, "venv/bin/", f"{shlex.quote(str(Path(sys.executable).parent))}/")
    deliver = _replaced(deliver, f"127.0.0.1:{PAGE_PORT}", f"127.0.0.1:{port}")
    log = tmp_path / "function.log"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    with log.open("wb") as output:
        server = subprocess.Popen(
            ["bash", "-e", "-c", serve],
            cwd=REPO_ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        holder = wait_for_own_answer(
            port,
            server.pid,
            answers=lambda: _answers(f"http://127.0.0.1:{port}/"),
            running=lambda: server.poll() is None,
            timeout=START_TIMEOUT_SECONDS,
            may_move=False,
        )
        assert holder is None, f"the served function did not answer ({holder}):\n{log.read_text()[-3000:]}"
        answers = []
        for _ in range(2):
            sent = subprocess.run(
                ["bash", "-e", "-c", deliver], capture_output=True, text=True, timeout=120, check=True
            )
            answers.append(json.loads(sent.stdout))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert [answer["outcome"] for answer in answers] == ["executed", "duplicate_completed"], answers
    assert answers[0]["output"] == answers[1]["output"] == {"slept_seconds": 1}
    assert answers[0]["run_id"] == answers[1]["run_id"]
