"""Servers and `python -m` runs forked from one process (localrun/server_forks.py) are what the
command line would have started: each its own process group, environment and code, ended as
any process is, and the run's exit code and output are the command's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from localrun import FUNCTION_DIR
from localrun.function_server import FunctionServer
from localrun.server_forks import run_module
from tests.support.waiting import wait_until

JOB_SOURCE = """from exactly_once import RunContext


def run(context: RunContext) -> None:
    pass
"""


def test_a_run_answers_its_exit_code_and_output_and_sees_the_environment_it_was_given(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(
        "import os, sys\nprint(os.environ['PROBE'], os.getcwd())\nprint('to stderr', file=sys.stderr)\n"
        "sys.exit(int(sys.argv[1]))\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PROBE": "first"}
    first = run_module("probe", ["3"], env, tmp_path, timeout=60)
    second = run_module("probe", ["0"], {**env, "PROBE": "second"}, tmp_path, timeout=60)
    assert (first.returncode, first.stdout, first.stderr) == (3, f"first {tmp_path}\n", "to stderr\n")
    assert (second.returncode, second.stdout) == (0, f"second {tmp_path}\n")


def test_a_forked_server_serves_the_function_of_its_own_source_and_is_crashed_as_a_process_group(
    tmp_path: Path, emulator_host: str
) -> None:
    # A copy of function/ whose job module exists only there: the server imports the copy's.
    copy = tmp_path / "function"
    shutil.copytree(FUNCTION_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "build"))
    (copy / "jobs" / "only_in_the_copy.py").write_text(JOB_SOURCE, encoding="utf-8")
    env = {
        "FIRESTORE_EMULATOR_HOST": emulator_host,
        "GOOGLE_CLOUD_PROJECT": "test-forks",
        "JOB_HANDLER": "jobs.only_in_the_copy:run",
    }
    server = FunctionServer(env, tmp_path / "server.log", source=copy / "main.py", forked=True)
    server.start()
    try:
        assert server.pid is not None and os.getpgid(server.pid) == server.pid != os.getpgid(0)
        assert requests.get(server.url + "robots.txt", timeout=10).status_code == 404
        workers = server.worker_pids()
        assert workers, "gunicorn's worker is the forked server's child"
        server.crash()
        assert not server.running
        wait_until(
            lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers) or None,
            timeout=30,
            what="the crashed server's worker to be gone",
        )
    finally:
        server.stop()


def test_a_launcher_or_another_interpreter_is_never_forked(tmp_path: Path) -> None:
    with_launcher = FunctionServer({}, tmp_path / "a.log", launcher=("env",), forked=True)
    other_python = FunctionServer({}, tmp_path / "b.log", python=Path(sys.executable), forked=True)
    assert not with_launcher._forked and not other_python._forked


def test_a_run_past_its_timeout_is_killed_and_raises(tmp_path: Path) -> None:
    (tmp_path / "sleeper.py").write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    with pytest.raises(subprocess.TimeoutExpired):
        run_module("sleeper", [], dict(os.environ), tmp_path, timeout=1)
