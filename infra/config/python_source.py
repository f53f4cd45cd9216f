"""Parsing Python source into a syntax tree, with no collection of garbage in the middle.

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
