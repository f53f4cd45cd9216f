"""The watermark job of docs/jobs.md, as a forker copies it into function/jobs/, served by a
real Functions Framework server on the emulator: its second run continues from the first."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER
from localrun import FUNCTION_DIR
from tests.support.demo_runs import server_env
from tests.support.doc_examples import WATERMARK_JOB, example_source
from tests.support.mypy_cache import seed_mypy_cache

JOB = "eos-dev_export"


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 10, 16, hour, minute, tzinfo=UTC)


def deliver(server, time: datetime) -> Any:
    headers = {JOB_NAME_HEADER: JOB, SCHEDULE_TIME_HEADER: time.strftime("%Y-%m-%dT%H:%M:%SZ")}
    reply = requests.post(server.url, headers=headers, data=b"", timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_second_run_continues_from_the_first_runs_watermark(
    tmp_path: Path, function_servers, emulator_host, project, db
):
    function = tmp_path / "function"
    shutil.copytree(
        FUNCTION_DIR, function, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    )
    (function / WATERMARK_JOB).write_text(example_source(WATERMARK_JOB))
    server = function_servers(
        server_env(emulator_host, project, JOB_HANDLER="jobs.watermark:run"), source=function / "main.py"
    )
    events = db.collection("events")
    for name, time in (("a", at(2, 10)), ("b", at(2, 50)), ("c", at(3, 10))):
        events.document(name).set({"at": time})

    first = deliver(server, at(3, 0))
    assert (first["outcome"], first["output"]) == (
        "executed",
        {"exported": 2, "watermark": at(2, 50).isoformat(), "after_run": None},
    )
    events.document("d").set({"at": at(3, 30)})
    second = deliver(server, at(4, 0))
    assert (second["outcome"], second["output"]) == (
        "executed",
        {"exported": 2, "watermark": at(3, 30).isoformat(), "after_run": at(3, 0).isoformat()},
    )
    assert deliver(server, at(4, 0))["output"] == second["output"]  # a duplicate: not run again


def test_the_watermark_job_passes_lint_and_typecheck_where_a_forker_puts_it(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """What `make test` applies to a fork's job module: ruff and mypy --strict (from the test
    run's warm cache, tests/support/mypy_cache.py)."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "ruff").exists() or not (bin_dir / "mypy").exists():
        pytest.skip("ruff and mypy are installed in venv/, not in the runtime's virtualenv")
    shutil.copy(FUNCTION_DIR.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    seed_mypy_cache(tmp_path, tmp_path_factory)
    (tmp_path / "function" / "jobs").mkdir(parents=True)
    (tmp_path / "function" / "exactly_once").symlink_to(FUNCTION_DIR / "exactly_once")
    module = f"function/{WATERMARK_JOB}"
    (tmp_path / module).write_text(example_source(WATERMARK_JOB))
    for command in (
        [str(bin_dir / "ruff"), "check", module],
        [str(bin_dir / "ruff"), "format", "--check", module],
        [str(bin_dir / "mypy"), "--cache-dir", str(tmp_path / ".mypy_cache"), module],
    ):
        result = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
        )
        assert result.returncode == 0, f"{command[0]}: {result.stdout}{result.stderr}"
