"""A copy of this checkout as a fork has it, and the copy without the optional parts.

`make test` proves on a copy that a fork deleting the optional parts (tools/optional_parts.py)
still imports, checks, lints and demos (tests/test_fork_prune.py); the rest of the suite in
such a fork costs as long as `make test` itself, too long for every push. `make test-pruned`
runs all of it: `python -m tools.pruned_checkout` writes the copy into `.pruned/` (the
working tree as it is, committed or not, every part this checkout still has deleted, the
docs' tables regenerated as a fork does after deleting), sharing this checkout's
virtualenvs, and the Makefile runs `make test` in it. Run it before a release, or after
moving code across a part's border.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from infra.config.paths import REPO_ROOT
from tools.optional_parts import OPTIONAL_PARTS

# The virtualenvs the Makefile makes, which the copy links to instead of installing again.
VIRTUALENVS = ("venv", "venv-py312", "policy/venv")


def copy_checkout(target: Path, source: Path = REPO_ROOT) -> Path:
    """Copy the tracked files and the untracked ones git does not ignore into `target` (a
    forker runs `make test` before committing), keeping their times, so that the copy's
    Makefile sees requirements as old as the virtualenvs it shares."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    names = subprocess.run(listing, cwd=source, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        path = source / name
        if path.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / name)
    return target


def delete_optional_parts(root: Path) -> None:
    """Delete from `root` every optional part's paths it still has, as `git rm -r` would."""
    for path in (root / path for part in OPTIONAL_PARTS for path in part.paths):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def pruned_checkout(target: Path, source: Path = REPO_ROOT) -> Path:
    """`target`, emptied, then the pruned copy of `source` with its docs' tables regenerated
    and links to `source`'s virtualenvs."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    copy_checkout(target, source)
    delete_optional_parts(target)
    # A repository of its own, as a fork's clone is: the tests list the checkout's files with
    # git, which inside this checkout would otherwise answer for this checkout instead.
    identity = ["-c", "user.name=pruned checkout", "-c", "user.email=pruned@localhost"]
    for command in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "pruned checkout"]):
        subprocess.run(["git", *command], cwd=target, check=True)
    for name in VIRTUALENVS:
        if (source / name).is_dir():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).symlink_to((source / name).resolve(), target_is_directory=True)
    # The copy's own packages, before any this checkout's virtualenv installed in place.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target / "function"), str(target)])}
    subprocess.run([sys.executable, "-m", "tools.docs_tables"], cwd=target, env=env, check=True)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("target", type=Path, help="where to write the copy (emptied first)")
    args = parser.parse_args(argv)
    print(f"pruned copy of {REPO_ROOT} in {pruned_checkout(args.target.resolve())}")


if __name__ == "__main__":
    main()
