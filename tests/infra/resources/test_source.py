"""The source object is named by a hash of file contents only."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from infra.config.schema import REPO_ROOT
from infra.resources.source import source_files, source_hash


@pytest.fixture
def function_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "function"
    shutil.copytree(REPO_ROOT / "function", copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def test_hash_changes_when_a_file_changes(function_copy: Path) -> None:
    before = source_hash(function_copy)
    main = next(path for name, path in source_files(function_copy) if name.endswith(".py"))
    main.write_bytes(main.read_bytes() + b"\n# changed\n")
    assert source_hash(function_copy) != before


def test_hash_changes_when_a_file_is_added_or_renamed(function_copy: Path) -> None:
    before = source_hash(function_copy)
    (function_copy / "extra.py").write_text("X = 1\n")
    added = source_hash(function_copy)
    (function_copy / "extra.py").rename(function_copy / "renamed.py")
    assert len({before, added, source_hash(function_copy)}) == 3


def test_hash_ignores_timestamps_caches_and_location(function_copy: Path, tmp_path: Path) -> None:
    before = source_hash(function_copy)
    for _, path in source_files(function_copy):
        os.utime(path, (1_000_000, 1_000_000))
    cache = function_copy / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "main.cpython-311.pyc").write_bytes(b"\x00compiled")
    (function_copy / "stray.pyc").write_bytes(b"\x00")
    moved = shutil.copytree(function_copy, tmp_path / "elsewhere" / "function")
    assert source_hash(function_copy) == before
    assert source_hash(moved) == before


def test_archive_paths_are_relative_sorted_and_exclude_caches(function_copy: Path) -> None:
    (function_copy / "__pycache__").mkdir(exist_ok=True)
    (function_copy / "__pycache__" / "x.pyc").write_bytes(b"")
    names = [name for name, _ in source_files(function_copy)]
    assert names == sorted(names)
    assert "requirements.txt" in names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert not any(name.startswith("/") for name in names)


def test_the_archive_holds_what_runs_and_no_packaging_leftovers(function_copy: Path) -> None:
    """Installing function/ as a package leaves metadata behind; the packaging files are for
    pip, not for Cloud Run's build. The deployed archive is the entry module, the requirements,
    the job modules and the library."""
    (function_copy / "exactly_once_scheduler_runs.egg-info").mkdir(exist_ok=True)
    (function_copy / "exactly_once_scheduler_runs.egg-info" / "PKG-INFO").write_text("Name: x\n")
    (function_copy / "build" / "lib").mkdir(parents=True, exist_ok=True)
    (function_copy / "build" / "lib" / "x.py").write_text("X = 1\n")
    top_level = {name.split("/")[0] for name, _ in source_files(function_copy)}
    assert top_level == {"main.py", "requirements.txt", "jobs", "exactly_once"}


def test_a_forkers_packages_named_build_or_dist_are_deployed(function_copy: Path) -> None:
    """Build output is left out where pip writes it, at the top of function/; a job package of
    the same name deeper down is code that runs, and caches and metadata stay out at any depth."""
    for package in ("build", "dist"):
        (function_copy / "jobs" / package).mkdir()
        (function_copy / "jobs" / package / "__init__.py").write_text("def run(context): ...\n")
    (function_copy / "jobs" / "build" / "__pycache__").mkdir()
    (function_copy / "jobs" / "build" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    (function_copy / "jobs" / "vendored.egg-info").mkdir()
    (function_copy / "jobs" / "vendored.egg-info" / "PKG-INFO").write_text("Name: x\n")
    (function_copy / "dist").mkdir(exist_ok=True)
    (function_copy / "dist" / "x.whl").write_bytes(b"")
    names = {name for name, _ in source_files(function_copy)}
    assert {"jobs/build/__init__.py", "jobs/dist/__init__.py"} <= names
    assert not {name for name in names if "__pycache__" in name or ".egg-info" in name}
    assert not {name for name in names if name.startswith("dist/")}


def test_missing_source_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        source_hash(tmp_path / "nope")
