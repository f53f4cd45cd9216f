"""The deployables' import boundaries, read from the source (nothing is imported to check).

`function/` is deployed alone, so it may import only itself, the standard library and what
function/requirements.txt installs. The Pulumi program and the policy pack run in virtualenvs
that install neither the Firestore client nor the Functions Framework, yet they share a few
definitions with the function (header names, defaults, record fields): those modules of
function/ must reach nothing beyond the standard library.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from infra.config_schema import REPO_ROOT

FUNCTION = REPO_ROOT / "function"
# Top-level import names of function/requirements.txt's distributions and of the two they are
# built on (Flask under the Functions Framework, gRPC under the Google Cloud clients).
FUNCTION_PACKAGES = {"functions_framework", "flask", "google", "grpc", "requests", "croniter"}


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _function_module(name: str) -> Path | None:
    base = FUNCTION / name.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _is_stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names or name == "__future__"


def test_the_function_imports_nothing_outside_itself() -> None:
    foreign = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in FUNCTION.rglob("*.py")
        for name in _imports(path)
        if not _is_stdlib(name)
        and _function_module(name) is None
        and name.split(".")[0] not in FUNCTION_PACKAGES
    }
    assert foreign == set()


def test_what_the_program_and_the_pack_share_with_the_function_needs_only_the_standard_library() -> None:
    users = [
        REPO_ROOT / "__main__.py",
        *(REPO_ROOT / "infra").glob("*.py"),
        *(REPO_ROOT / "policy").glob("*.py"),
    ]
    pending = [(name, str(path.relative_to(REPO_ROOT))) for path in users for name in _imports(path)]
    shared: set[str] = set()
    beyond: set[str] = set()
    while pending:
        name, importer = pending.pop()
        module = _function_module(name)
        if module is None or name in shared:
            continue
        shared.add(name)
        for imported in _imports(module):
            if _function_module(imported) is not None:
                pending.append((imported, name))
            elif not _is_stdlib(imported):
                beyond.add(f"{name} (used by {importer}) imports {imported}")
    assert "scheduler_request" in shared and "record_fields" in shared  # the check sees the imports
    assert beyond == set()
