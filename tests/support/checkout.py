"""A copy of this checkout as a fork would have it: what the working tree holds, committed or not
(a forker runs `make test` before committing), without what git ignores (virtualenvs, caches)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from infra.config.paths import REPO_ROOT


def copy_checkout(target: Path, source: Path = REPO_ROOT) -> Path:
    """Copy the tracked files and the untracked ones git does not ignore into `target`."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    names = subprocess.run(listing, cwd=source, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        path = source / name
        if path.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / name)
    return target
