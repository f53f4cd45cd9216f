"""Where the repository and the function's deployable source are: standard library only, so
the local run imports it on any Python that runs the function's tests."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# The deployed source: main.py, jobs/ and the exactly_once package.
FUNCTION_DIR = REPO_ROOT / "function"
