"""The first `make demo` (or `make install`) installs the virtualenvs, a minute or more with
pip kept quiet: make says what it is doing before each quiet step, not after a silent minute."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from infra.config.schema import REPO_ROOT

# A hard bound, not a performance assertion: a hang fails, it never waits forever.
TIMEOUT_SECONDS = 120


def test_each_virtualenv_is_announced_before_pip_installs_into_it(tmp_path: Path) -> None:
    # Virtualenvs whose python only notes that it was called: nothing is installed.
    venvs = {name: tmp_path / name for name in ("venv", "policy-venv")}
    for venv in venvs.values():
        python = venv / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text('#!/bin/sh\necho "$*" >> "$CALLS"\n')
        python.chmod(0o755)
    calls = tmp_path / "calls"
    result = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "install",
            f"VENV={venvs['venv']}",
            f"POLICY_VENV={venvs['policy-venv']}",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "CALLS": str(calls)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(calls.read_text().splitlines()) == 2  # one pip install into each
    lines = result.stdout.splitlines()
    for venv in venvs.values():
        (install,) = [
            n for n, line in enumerate(lines) if line.startswith(f"{venv}/bin/python -m pip install")
        ]
        announced = [line for line in lines[:install] if line.startswith(f"{venv}/: installing ")]
        assert announced, lines
        assert "pip prints nothing until it is done" in announced[-1]
        assert f"{venv}/: installed" in lines[install:]
