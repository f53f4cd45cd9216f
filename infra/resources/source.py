"""The function's deployable source: which files, their content hash, and the archive.

The source object is named by the hash, so `pulumi up` replaces it (and the function picks up
its new generation) exactly when a deployed file's bytes change, never because of a rebuild,
a timestamp or a local cache directory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import pulumi

# Never deployed: interpreter caches and tool state that differ between machines, and what
# installing function/ as a package (pip install ./function) reads or leaves behind. The
# archive holds what runs: main.py, requirements.txt, jobs/ and the exactly_once package.
# Caches and package metadata are left out at any depth: none is a name a Python package can
# have. Build output and virtualenvs only at the top of function/, where pip and a developer
# put them: deeper down, `build` or `dist` is a fork's own package (jobs/build/) and deploys.
_EXCLUDED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
_EXCLUDED_DIR_SUFFIXES = (".egg-info", ".dist-info")
_EXCLUDED_TOP_LEVEL_DIRS = frozenset({"build", "dist", "venv", ".venv"})
_EXCLUDED_TOP_LEVEL_FILES = frozenset({"pyproject.toml", "README.md", "LICENSE"})
_EXCLUDED_SUFFIXES = (".pyc", ".pyo")


def source_files(root: Path) -> list[tuple[str, Path]]:
    """(archive path, file) for every deployable file under `root`, sorted by archive path."""
    if not root.is_dir():
        raise FileNotFoundError(f"function source directory {root} does not exist")
    files = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if not path.is_file() or any(
            part in _EXCLUDED_DIRS or part.endswith(_EXCLUDED_DIR_SUFFIXES) for part in relative.parts
        ):
            continue
        if path.name.endswith(_EXCLUDED_SUFFIXES) or path.name == ".DS_Store":
            continue
        top = relative.parts[0]
        if top in (_EXCLUDED_TOP_LEVEL_DIRS if len(relative.parts) > 1 else _EXCLUDED_TOP_LEVEL_FILES):
            continue
        files.append((relative.as_posix(), path))
    return sorted(files)


def source_hash(root: Path, generated: Mapping[str, str] | None = None) -> str:
    """SHA-256 over archive paths and file contents only (no timestamps, no permissions),
    `generated` files (archive path: text, e.g. the job table) included."""
    digest = hashlib.sha256()
    contents = [(name, path.read_bytes()) for name, path in source_files(root)]
    contents += [(name, text.encode()) for name, text in (generated or {}).items()]
    for name, content in sorted(contents):
        # Length-prefixed so that moving bytes between a name and a file changes the hash.
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def source_archive(root: Path, generated: Mapping[str, str] | None = None) -> pulumi.AssetArchive:
    """The zip Cloud Build receives: function/ as its root, so main.py is at the top, with the
    `generated` files beside (and in place of) the checked-out ones."""
    assets: dict[str, pulumi.Asset | pulumi.Archive] = {
        name: pulumi.FileAsset(str(path)) for name, path in source_files(root)
    }
    assets.update({name: pulumi.StringAsset(text) for name, text in (generated or {}).items()})
    return pulumi.AssetArchive(assets)
