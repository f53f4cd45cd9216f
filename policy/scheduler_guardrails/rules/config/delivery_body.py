"""The body a Cloud Scheduler job sends: is it one the deployed function accepts? Checked before deploy.

A job's body is fixed when the stack is deployed and is the same on every run and retry, so a
body the function refuses is refused every time, and the job never runs:

- over MAX_BODY_BYTES, every delivery is answered `413 body_too_large` before anything is read
  or written (function/exactly_once/delivery/handler.py);
- not strict JSON (exactly_once/strict_json.py: no NaN or Infinity, no integer beyond 64 bits,
  at most 32 levels of nesting), `RunContext.json_body` fails the run terminally. YAML writes a
  NaN as `.nan` and an infinity as `.inf`; Python's json module would send them as `NaN` and
  `Infinity`, which are not JSON.

The stack's settings (infra/settings/body_checks.py, so `pulumi up` and `make check`) and the
policy pack (scheduler_jobs.py, on the bytes a Scheduler job declares) both ask
`body_problems`, so the three never disagree.

The limit is read from the function's source, not imported: it is defined in the module that
serves a delivery, which imports the Google Cloud clients, and the program and the pack may
import only the function's standard-library modules (tests/infra/test_boundaries.py). It is
read the way a handler is (handlers.py): from the syntax tree of the function's source, so the
number stays the function's own. Whose source is the caller's to say: the program's is the
function/ it deploys, the pack's the function's distribution installed beside it.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from exactly_once import strict_json

from .handlers import module_file
from .problems import SettingsError
from .python_source import last_binding, parse_python_file

# Where the function defines its limit on a delivery's body.
LIMIT_MODULE: Final = "exactly_once.delivery.handler"
LIMIT_NAME: Final = "MAX_BODY_BYTES"
# The operators a constant size is written with (64 * 1024, 1 << 16).
_OPERATORS: Final[dict[type[ast.operator], Callable[[int, int], Any]]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Pow: lambda a, b: a**b,
    ast.LShift: lambda a, b: a << b,
}
_PLAIN_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# How a stack file writes each number JSON cannot hold (YAML), and what Python's json sends for it.
_NON_FINITE: Final = {"nan": ".nan (NaN)", "inf": ".inf (Infinity)", "-inf": "-.inf (-Infinity)"}


@functools.cache
def max_body_bytes(function_dir: Path) -> int:
    """The largest body, in bytes, the function deployed from `function_dir` accepts.

    SettingsError when its source no longer defines the limit as a whole number: then nothing
    here can say what it accepts, and guessing would pass a body it refuses."""
    path = module_file(LIMIT_MODULE, function_dir)
    shown = f"function/{LIMIT_MODULE.replace('.', '/')}.py"
    value = None
    if path is not None:
        binding = last_binding(parse_python_file(path).body, LIMIT_NAME)
        value = _whole_number(binding) if binding is not None else None
    if value is None or value < 0:
        raise SettingsError(
            f"{shown} defines no {LIMIT_NAME} as a whole number, so no job's body can be checked "
            "against what the function accepts"
        )
    return value


def _whole_number(node: ast.AST) -> int | None:
    """The value of a constant integer expression, or None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = _whole_number(node.operand)
        return -operand if operand is not None else None
    if isinstance(node, ast.BinOp) and (operator := _OPERATORS.get(type(node.op))) is not None:
        left, right = _whole_number(node.left), _whole_number(node.right)
        if left is None or right is None:
            return None
        result = operator(left, right)
        return result if type(result) is int else None
    return None


def body_problems(body: bytes, limit: int) -> list[str]:
    """Why the function refuses `body` (the exact bytes Cloud Scheduler sends), each as a
    phrase; empty when it accepts it."""
    problems: list[str] = []
    if len(body) > limit:
        problems.append(
            f"the body Cloud Scheduler sends is {len(body):,} bytes, more than the {limit:,} bytes the "
            f"function accepts ({LIMIT_NAME}): every delivery would be answered 413 body_too_large and "
            "the job would never run; send parameters, and keep bulk data where the job reads it (a "
            "bucket, a table)"
        )
    try:
        strict_json.loads(body)
    except strict_json.StrictJsonError as error:
        non_finite = _non_finite_numbers(body)
        if non_finite:
            numbers = ", ".join(f"{path} is {number}" for path, number in non_finite)
            problems.append(
                f"{numbers}: JSON has no such number, so the function refuses the body "
                "(RunContext.json_body fails every run terminally); write a finite number"
            )
        else:
            problems.append(
                f"the body is not JSON the function reads ({error}): RunContext.json_body would "
                "fail every run terminally"
            )
    return problems


def _non_finite_numbers(body: bytes) -> list[tuple[str, str]]:
    """(path, number) of each NaN or infinity in `body`, as Python's json module reads it;
    empty when that module cannot read it either."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return []
    found: list[tuple[str, str]] = []
    pending: list[tuple[str, Any]] = [("body", value)]
    while pending:
        path, item = pending.pop()
        if isinstance(item, dict):
            pending.extend((_member(path, key), child) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            pending.extend((f"{path}[{index}]", child) for index, child in reversed(list(enumerate(item))))
        elif isinstance(item, float) and not math.isfinite(item):
            found.append((path, _NON_FINITE[repr(item)]))
    return found


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if _PLAIN_KEY.match(key) else f"{path}[{key!r}]"
