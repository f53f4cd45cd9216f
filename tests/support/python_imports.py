"""What a module of function/ imports when it runs, read from its source (nothing is imported):
the import-boundary tests' one reader."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from infra.config.schema import REPO_ROOT
from policy.scheduler_guardrails.rules.config.python_source import parse_python_file

FUNCTION = REPO_ROOT / "function"
# What the function may import of its own: its library and the forker's job modules.
FUNCTION_ROOTS = {"exactly_once", "jobs"}


def runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:`, which never run."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in (child, *runtime_nodes(child)))
            continue
        yield node
        yield from runtime_nodes(node)


def imports_of(path: Path) -> Iterator[str]:
    """Modules `path` imports when it runs: `from package import submodule` names both."""
    for node in runtime_nodes(parse_python_file(path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            for alias in node.names:
                if function_module(f"{node.module}.{alias.name}") is not None:
                    yield f"{node.module}.{alias.name}"


def function_module(name: str) -> Path | None:
    base = FUNCTION / name.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def is_stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names or name == "__future__"


def named_imports(path: Path) -> set[str]:
    """Every module an import in `path` names, wherever the import stands (inside a function,
    under TYPE_CHECKING): what ties one module to another, whether or not it runs."""
    names: set[str] = set()
    for node in ast.walk(parse_python_file(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names
