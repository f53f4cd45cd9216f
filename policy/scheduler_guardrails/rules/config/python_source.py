"""Parsing Python source into a syntax tree, with no collection of garbage in the middle, and
finding what a module binds a name to at its top level.

On CPython 3.11 a parse that starts while another is building its tree breaks the outer one
("SystemError: AST constructor recursion depth mismatch"). One thread is enough for that: a
garbage collection triggered inside the outer parse can finalize an asyncio future whose
exception nobody retrieved (a failed Pulumi run under mocks leaves such futures), and logging
it formats a traceback, which parses source. So every parse of this repository's tools and
tests goes through here, with the cyclic collector paused for its length.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename=filename)
    finally:
        if enabled:
            gc.enable()


def parse_python_file(path: Path) -> ast.Module:
    return parse_python(path.read_text(encoding="utf-8"), filename=str(path))


def last_binding(body: list[ast.stmt], name: str) -> ast.AST | None:
    """What `name` is bound to at the end of the module's top level (the last binding wins),
    looking into top-level if/try/with blocks; for an assignment, the assigned value. The
    checks that read function/ without importing it (a handler, the body limit) ask this."""
    found: ast.AST | None = None
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if statement.name == name:
                found = statement
        elif isinstance(statement, ast.ImportFrom | ast.Import):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in statement.names):
                found = statement
        elif isinstance(statement, ast.Assign):
            if any(isinstance(target, ast.Name) and target.id == name for target in statement.targets):
                found = statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            if isinstance(statement.target, ast.Name) and statement.target.id == name:
                found = statement.value
        else:
            for block in _blocks(statement):
                found = last_binding(block, name) or found
    return found


def _blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(statement, ast.If):
        return [statement.body, statement.orelse]
    if isinstance(statement, ast.Try):
        return [statement.body, *(h.body for h in statement.handlers), statement.orelse, statement.finalbody]
    if isinstance(statement, ast.With):
        return [statement.body]
    return []
