"""One warm mypy cache for the projects the tests build and type-check: copies of the checkout
(a fork, a pruned fork, the quick loop's), and folders holding one documented job.

mypy's first run in a project reads the function's package and every library it imports, seven
seconds of CPU for the few files `make check` type-checks, where a run that starts from a cache
re-checks only what changed. A cached module counts as unchanged only when its source has the
size and the content of the one cached (a module at another path, or with another time, is read
and its hash compared), and whatever imports a changed module is checked again: a project that
starts from this cache gets the verdicts a first run would give it, at about a seventh of the
CPU. Each project gets a copy of its own, as its `.mypy_cache/`, which it may then update.

The cache is built once per test run, from this checkout's function/jobs/ and tests/jobs/ (what
`make check` type-checks), by whichever pytest-xdist worker asks first, the others waiting for
it; the processes the tests start inherit where it is (CACHE_ENV), so a test run inside a copy
(tests/test_fork_path.py, tests/test_fork_prune.py) builds none of its own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config.paths import REPO_ROOT

# Where the test run's warm cache is, for the test runs its tests start.
CACHE_ENV = "EOS_TESTS_MYPY_CACHE"
# Written last, so a cache without it was not finished (its builder was stopped).
BUILT_MARKER = ".built"


def _shared_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this test run that all its pytest-xdist workers share."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test run's warm cache: the inherited one, or one built now (once for all workers)."""
    inherited = os.environ.get(CACHE_ENV)
    if inherited and (Path(inherited) / BUILT_MARKER).exists():
        return Path(inherited)
    shared = _shared_directory(tmp_path_factory)
    cache = shared / "warm-mypy-cache"
    with (shared / "warm-mypy-cache.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cache / BUILT_MARKER).exists():
            # Imported here: the function's tests run on the runtime's virtualenv too, which
            # has neither mypy nor what `make check` imports (the tests that type-check skip there).
            from tools.fork_check import YOUR_CODE

            shutil.rmtree(cache, ignore_errors=True)
            paths = [path for path in YOUR_CODE if (REPO_ROOT / path).exists()]
            # Its verdict is not this cache's concern: tests/test_fork_checks.py reports it.
            command = [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *paths]
            subprocess.run(command, cwd=REPO_ROOT, capture_output=True, check=False)
            (cache / BUILT_MARKER).touch()
    os.environ[CACHE_ENV] = str(cache)
    return cache


def seed_mypy_cache(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`project`'s `.mypy_cache/` (which must not exist yet), a copy of the warm cache."""
    target = project / ".mypy_cache"
    shutil.copytree(warm_cache(tmp_path_factory), target)
    return target
