"""The repository's own Python sources under a folder: what the source-reading tests scan.

A folder may hold a virtualenv of its own (`policy/venv`, made by `make install`) or a build's
output; those are installed packages, not this repository's code, and thousands of files.
"""

from __future__ import annotations

from pathlib import Path

NOT_OURS = frozenset({"venv", ".venv", "__pycache__", "build", "dist", "node_modules"})


def python_sources(folder: Path) -> list[Path]:
    """Every .py file under `folder` that is the repository's, in a stable order."""
    return sorted(
        path
        for path in folder.rglob("*.py")
        if not NOT_OURS.intersection(path.relative_to(folder).parts)
        and not any(part.endswith(".egg-info") for part in path.parts)
    )
