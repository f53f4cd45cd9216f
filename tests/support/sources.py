"""The repository's own Python sources under a folder: what the source-reading tests scan, and
the string constants a source's code spells.

They are the checkout's files as git sees them (`checkout_files` of tools/optional_parts.py):
tracked, or new and not ignored. What git ignores is not this repository's code however much of
it is Python: a virtualenv (`policy/venv`, made by `make install`), compiled modules, and a
build's output (`pip wheel ./function` leaves a copy of the package in `function/build/lib/`,
stale as soon as the source changes), nor is what a fork deleted with `git rm -r` and whose
compiled modules stayed behind.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from infra.config.paths import REPO_ROOT
from policy.scheduler_guardrails.rules.config.python_source import parse_python
from tools.optional_parts import checkout_files


def python_sources(folder: Path) -> list[Path]:
    """Every .py file under `folder` that is the repository's, in a stable order; none when the
    checkout has no such folder (an optional part a fork deleted)."""
    if not folder.is_dir():
        return []
    return [folder / name for name in checkout_files(folder) if name.endswith(".py")]


def git_checkout(root: Path, files: Mapping[str, str]) -> Path:
    """`root` made a git checkout of `files` (path: text), committed, ignoring what this
    repository ignores: a checkout small enough to run and prune in a test of the readers."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    shutil.copy2(REPO_ROOT / ".gitignore", root / ".gitignore")
    identity = ["-c", "user.name=a fork", "-c", "user.email=fork@localhost"]
    for command in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "the checkout"]):
        subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)
    return root


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the nodes that are docstrings: a module's, a class's or a function's."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _export_lists(tree: ast.AST) -> set[int]:
    """The strings of `__all__`: Python names a module re-exports, not values it spells."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            found.update(id(item) for item in ast.walk(node.value))
    return found


def string_constants(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant in `source`'s code, docstrings and `__all__` left out."""
    tree = parse_python(source)
    skipped = _docstrings(tree) | _export_lists(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            yield node.lineno, node.value
