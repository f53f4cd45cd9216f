"""The deployables' import boundaries, read from the source (nothing is imported to check).

`function/` is deployed alone, so it may import only itself (its package `exactly_once`, the
forker's `jobs`), the standard library and what function/requirements.txt installs. The
Pulumi program and the policy pack run in virtualenvs that need neither the Firestore client
nor the Functions Framework, yet they share a few definitions with the function (header names,
defaults, record fields): the modules of `exactly_once` they reach, and the package inits that
run on the way, must reach nothing beyond the standard library.
"""

from __future__ import annotations

import ast

from infra.config.schema import REPO_ROOT
from policy.scheduler_guardrails.rules.config.python_source import parse_python_file
from tests.support.python_imports import (
    FUNCTION,
    FUNCTION_ROOTS,
    function_module,
    imports_of,
    is_stdlib,
)
from tests.support.sources import python_sources

# Top-level import names of function/requirements.txt's distributions and of the two they are
# built on (Flask under the Functions Framework, gRPC under the Google Cloud clients).
FUNCTION_PACKAGES = {"functions_framework", "flask", "google", "grpc", "requests", "croniter"}
# What this stack deploys around the library, which the library itself never imports.
DEPLOYMENT_MODULES = {"main", "jobs"}
# Folders .gitignore keeps out of the repository: interpreter and tool caches, pip's build
# output (egg-info folders are matched by their suffix).
UNTRACKED_FOLDERS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build"}


def _imported_names(node: ast.AST) -> list[str]:
    """What one node imports, wherever it stands (under `if TYPE_CHECKING:` too)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module]
    return []


def _with_packages(name: str) -> list[str]:
    """`a.b.c` and the packages whose inits run first: `a`, `a.b`."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def test_the_function_imports_nothing_outside_itself() -> None:
    foreign = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in FUNCTION.rglob("*.py")
        for name in imports_of(path)
        if not is_stdlib(name) and name.split(".")[0] not in FUNCTION_ROOTS | FUNCTION_PACKAGES
    }
    assert foreign == set()
    unresolved = {
        name
        for path in FUNCTION.rglob("*.py")
        for name in imports_of(path)
        if name.split(".")[0] in FUNCTION_ROOTS and function_module(name) is None
    }
    assert unresolved == set()


def test_function_has_one_package_and_no_other_top_level_module() -> None:
    """Cloud Run puts function/ on sys.path: every top-level name there is taken from the
    forker's namespace, so there are only the entry module and the two packages. A folder
    without an __init__.py is a namespace package to an importer, so it counts too."""
    modules = {path.name for path in FUNCTION.glob("*.py")}
    packages = {path.parent.name for path in FUNCTION.glob("*/__init__.py")}
    folders = {
        path.name
        for path in FUNCTION.iterdir()
        if path.is_dir() and path.name not in UNTRACKED_FOLDERS and not path.name.endswith(".egg-info")
    }
    assert (modules, packages, folders) == ({"main.py"}, FUNCTION_ROOTS, FUNCTION_ROOTS)


def test_the_library_never_imports_the_deployment() -> None:
    """`pip install ./function` installs exactly_once alone, without main.py or jobs/: an
    import of either, even one only the type checker follows, would break every app that
    uses the package on its own. Handlers are named as text and imported by the router."""
    reaching = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in (FUNCTION / "exactly_once").rglob("*.py")
        for node in ast.walk(parse_python_file(path))
        for name in _imported_names(node)
        if name.split(".")[0] in DEPLOYMENT_MODULES
    }
    assert reaching == set()


def test_what_the_program_and_the_pack_share_with_the_function_needs_only_the_standard_library() -> None:
    users = [
        REPO_ROOT / "__main__.py",
        *python_sources(REPO_ROOT / "infra"),
        # the pack, less its tests (one reads the function's body limit from where it is defined)
        *(
            path
            for path in python_sources(REPO_ROOT / "policy")
            if path.parts[len(REPO_ROOT.parts) + 1] != "tests"
        ),
    ]
    pending = [
        (module, str(path.relative_to(REPO_ROOT)))
        for path in users
        for name in imports_of(path)
        for module in _with_packages(name)
    ]
    shared: set[str] = set()
    beyond: set[str] = set()
    while pending:
        name, importer = pending.pop()
        module = function_module(name)
        if module is None or name in shared:
            continue
        shared.add(name)
        for imported in imports_of(module):
            if function_module(imported) is not None:
                pending.extend((package, name) for package in _with_packages(imported))
            elif not is_stdlib(imported):
                beyond.add(f"{name} (used by {importer}) imports {imported}")
    # The check sees the imports: the header names and the record fields are shared.
    assert {"exactly_once.delivery.scheduler_request", "exactly_once.ledger.fields"} <= shared
    assert beyond == set()
