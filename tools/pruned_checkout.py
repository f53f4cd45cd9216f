"""A copy of this checkout as a fork has it, and the copy without the optional parts.

`make test` proves on a copy that a fork deleting the optional parts (tools/optional_parts.py)
still imports, checks, lints and demos (tests/test_fork_prune.py); the rest of the suite in
such a fork costs as long as `make test` itself, too long for every push. `make test-pruned`
runs all of it: `python -m tools.pruned_checkout` writes the copy into `.pruned/` and the
Makefile runs `make test` in it. Run it before a release, or after moving code across a part's
border.

The copy is pruned the way the README tells a fork to, and from the state a fork's checkout is
in when it does: the working tree as it is (committed or not), committed as a repository of its
own, sharing this checkout's virtualenvs; run, as `make check`, `make test` or
`make demo` leave a checkout, every module compiled and the function's package built; then
every part it still has deleted with `git rm -r`, which leaves the parts' compiled modules and
the build behind, the docs' tables regenerated (`make docs`) and the deletion committed.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from infra.config.paths import REPO_ROOT
from tools.optional_parts import OPTIONAL_PARTS, checkout_files

# The virtualenvs the Makefile makes, which the copy links to instead of installing again.
VIRTUALENVS = ("venv", "venv-py312", "policy/venv")
# Who commits in the copy, which is a repository of its own.
IDENTITY = ("-c", "user.name=pruned checkout", "-c", "user.email=pruned@localhost")


def _git(root: Path, *command: str) -> None:
    subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)


def copy_checkout(target: Path, source: Path = REPO_ROOT) -> Path:
    """Copy the tracked files and the untracked ones git does not ignore into `target` (a
    forker runs `make test` before committing), keeping their times, so that the copy's
    Makefile sees requirements as old as the virtualenvs it shares; and commit them there, a
    repository of its own, as a fork's clone is: the tests list a checkout's files with git,
    which inside this checkout would otherwise answer for this checkout instead."""
    for name in checkout_files(source):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target / name)
    _git(target, "init", "-q")
    _git(target, "add", "-A")
    _git(target, *IDENTITY, "commit", "-q", "-m", "The checkout")
    return target


def link_virtualenvs(target: Path, source: Path = REPO_ROOT) -> None:
    """Link `source`'s virtualenvs into `target` (git ignores them there too)."""
    for name in VIRTUALENVS:
        if (source / name).is_dir():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).symlink_to((source / name).resolve(), target_is_directory=True)


def run_once(root: Path) -> None:
    """Leave in `root` what running it leaves: every module compiled (the `__pycache__/` each
    process writes for what it imports) and the function's package built, as `pip wheel
    ./function` builds it in place (`function/build/`, its egg-info). git ignores all of it."""
    for name in checkout_files(root):
        if name.endswith(".py"):
            compileall.compile_file(root / name, quiet=2)
    with tempfile.TemporaryDirectory(prefix="pruned-wheel-") as wheels:
        build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check"]
        built = subprocess.run(
            [*build, "--wheel-dir", wheels, "./function"], cwd=root, capture_output=True, text=True
        )
        if built.returncode != 0:
            raise RuntimeError(f"pip wheel ./function failed in {root}:\n{built.stdout}{built.stderr}")


def delete_optional_parts(root: Path) -> None:
    """What the README tells a fork: `git rm -r` every optional part it still has, `make docs`
    (the tables list what is left, a deleted target kind's rows go), then commit."""
    paths = [path for part in OPTIONAL_PARTS for path in part.paths]
    _git(root, "rm", "-r", "-q", "--ignore-unmatch", "--", *paths)
    # The copy's own packages, before any this checkout's virtualenv installed in place.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "function"), str(root)])}
    subprocess.run([sys.executable, "-m", "tools.docs_tables"], cwd=root, env=env, check=True)
    _git(root, "add", "-A")
    _git(root, *IDENTITY, "commit", "-q", "--allow-empty", "-m", "Delete the optional parts")


def pruned_checkout(target: Path, source: Path = REPO_ROOT) -> Path:
    """`target`, emptied, then the pruned copy of `source`, from a checkout that has run."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    copy_checkout(target, source)
    link_virtualenvs(target, source)
    run_once(target)
    delete_optional_parts(target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("target", type=Path, help="where to write the copy (emptied first)")
    args = parser.parse_args(argv)
    print(f"pruned copy of {REPO_ROOT} in {pruned_checkout(args.target.resolve())}")


if __name__ == "__main__":
    main()
