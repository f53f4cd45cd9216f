"""A short demo run without faults, as a new user's first: what it prints, what its function
log holds, and that the `ops` command it prints reads its ledger."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exactly_once.config import DEFAULT_DATABASE
from infra.config.schema import REPO_ROOT
from localrun.demo import KEPT_EMULATOR_HOST, ledger_lines
from localrun.emulator import EMULATOR_HOST_ENV
from localrun.faults import Fault

# A hard bound on each command, not a performance assertion: a hang fails, it never waits forever.
TIMEOUT_SECONDS = 300
NO_FAULTS = [arg for fault in Fault for arg in (f"--{fault.value.replace('_', '-')}-rate", "0")]


@dataclass(frozen=True)
class DemoRun:
    out: Path
    stdout: str
    stderr: str
    report: dict[str, Any]


@pytest.fixture(scope="module")
def demo_run(emulator_host: str, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`python -m localrun.demo` on the tests' emulator (which outlives it), two runs, one instance."""
    out = tmp_path_factory.mktemp("demo")
    options = ["--runs", "2", "--instances", "1", *NO_FAULTS, "--output-dir", str(out)]
    demo = subprocess.run(
        [sys.executable, "-m", "localrun.demo", *options],
        cwd=REPO_ROOT,
        env={**os.environ, EMULATOR_HOST_ENV: emulator_host},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return DemoRun(out, demo.stdout, demo.stderr, report)


def test_the_ops_command_the_demo_prints_reads_its_runs(demo_run: DemoRun, emulator_host: str) -> None:
    ledger = demo_run.report["ledger"]
    project = ledger["project"]
    assert (ledger["emulator_host"], ledger["database"], ledger["emulator_kept"]) == (
        emulator_host,
        DEFAULT_DATABASE,
        True,
    )
    lines = demo_run.stdout.splitlines()
    said = (
        f"ledger: project {project}, database {DEFAULT_DATABASE} in the emulator at {emulator_host}; "
        "read it with:"
    )
    command = lines[lines.index(said) + 1].strip()
    assert command == ledger["ops_command"]

    assignment, *argv = shlex.split(command)
    name, _, value = assignment.partition("=")
    assert name == EMULATOR_HOST_ENV
    environment = {key: text for key, text in os.environ.items() if key != EMULATOR_HOST_ENV}
    ops = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        env={**environment, name: value},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert ops.returncode == 0, ops.stdout + ops.stderr
    shown = ops.stdout.splitlines()
    assert shown[0] == (
        f"stack demo: ledger in project {project}, database {DEFAULT_DATABASE}, "
        f"on the Firestore emulator at {emulator_host}"
    )
    completed = [line.split()[0] for line in shown if line.startswith("  ") and "status=completed" in line]
    assert sorted(completed) == sorted(run["schedule_time"] for run in demo_run.report["results"])


def test_after_its_own_emulator_stopped_the_demo_says_how_to_keep_one() -> None:
    ledger = {"project": "demo-0a1b2c3d", "database": DEFAULT_DATABASE, "emulator_host": "127.0.0.1:40001"}
    lines = ledger_lines({**ledger, "emulator_kept": False})
    assert lines[0].startswith("ledger: project demo-0a1b2c3d, database (default) in the emulator the demo ")
    assert lines[1:] == [
        f"  gcloud emulators firestore start --host-port={KEPT_EMULATOR_HOST} &",
        f"  {EMULATOR_HOST_ENV}={KEPT_EMULATOR_HOST} make demo",
    ]


def test_the_first_line_says_what_the_demo_does(demo_run: DemoRun) -> None:
    """Not a dependency's warning (google-api-core's about Python 3.11)."""
    assert demo_run.stderr.splitlines()[0] == "starting the Firestore emulator ..."
    assert "Warning" not in demo_run.stderr + demo_run.stdout


def test_the_function_log_holds_the_functions_json_lines_and_nothing_alarming(demo_run: DemoRun) -> None:
    """Every line is one JSON object, whatever else the servers printed; and a run without
    faults, its warm-up and the checks that the servers are up included, logs nothing above
    INFO (asking whether a server is up is not a request that the function refuses)."""
    text = (demo_run.out / "function.log").read_text(encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(line, dict) for line in lines)
    assert [line for line in lines if line["severity"] != "INFO"] == []
    assert sum(line.get("outcome") == "executed" for line in lines) == 3  # the warm-up and both runs
