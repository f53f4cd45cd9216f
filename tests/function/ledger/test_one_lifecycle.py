"""One package decides a run record's and a job's state: no other module of the function package
or of `ops/` reads or compares a record's `status`, names its values, imports the lifecycle's
Status, or compares with a state of a run (`State.COMPLETED`) or of a job (`JobState.PAUSED`).

A path that decides a run's state on its own (a give-back that forgets the checkpoint, a
catch-up that tests `record is None`, a release that misreads its own committed write) is how
each capability used to break another. Read from the source, so the rule holds for code no
test runs. The token check is left out: its records are idempotency tokens, with states of
their own (token_check/tokens.py), not run records.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from policy.scheduler_guardrails.rules.config.python_source import parse_python, parse_python_file
from tests.support.sources import python_sources

REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGE = REPO_ROOT / "function"
OPS = REPO_ROOT / "ops"
LIFECYCLE = PACKAGE / "exactly_once" / "ledger" / "lifecycle"
# Records of another kind, with a status of their own.
OTHER_RECORDS = (PACKAGE / "exactly_once" / "token_check",)
STATUS_VALUES = {"in_progress", "completed", "released"}
STATUS_NAMES = {"Status", "RunStatus", "STATUS"}
# The lifecycle's state enums: a module that names one of their members decides a state itself.
STATE_ENUMS = {"State", "JobState"}
LIFECYCLE_MODULES = {"lifecycle", "job_state", "states"}


def findings(tree: ast.AST) -> Iterator[str]:
    """Every place a tree reads a record's status or compares with one of its values."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_status(node.slice):
            yield f"line {node.lineno}: reads ['status']"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and _is_status(node.args[0]):
                yield f"line {node.lineno}: reads .get('status')"
        elif isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in STATUS_VALUES:
                    yield f"line {node.lineno}: compares with {side.value!r}"
        if isinstance(node, ast.Attribute) and _names_state_enum(node.value) and node.attr.isupper():
            yield f"line {node.lineno}: compares with {_dotted(node.value)}.{node.attr}"
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in STATUS_NAMES:
                yield f"line {node.lineno}: names {name}"
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in STATUS_NAMES:
                    yield f"line {node.lineno}: imports {alias.name}"


def _names_state_enum(node: ast.AST) -> bool:
    """`State`, `JobState`, or either through the lifecycle's modules (`lifecycle.State`); not
    another library's enum of the same name (`run_v2.Condition.State`)."""
    if isinstance(node, ast.Name):
        return node.id in STATE_ENUMS
    return (
        isinstance(node, ast.Attribute)
        and node.attr in STATE_ENUMS
        and isinstance(node.value, ast.Name)
        and node.value.id in LIFECYCLE_MODULES
    )


def _dotted(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else f"{_dotted(node.value)}.{node.attr}"  # type: ignore[attr-defined]


def _is_status(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "status"


def modules() -> Iterator[Path]:
    for path in [*python_sources(PACKAGE), *python_sources(OPS)]:
        if path.is_relative_to(LIFECYCLE) or any(path.is_relative_to(other) for other in OTHER_RECORDS):
            continue
        yield path


def test_no_module_but_the_lifecycle_reads_or_compares_a_run_records_status() -> None:
    found = {str(path.relative_to(REPO_ROOT)): list(findings(parse_python_file(path))) for path in modules()}
    assert {path: where for path, where in found.items() if where} == {}


def test_the_rule_finds_each_way_a_module_could_decide_a_state_itself() -> None:
    """The rule bites: each of these would decide a run's state outside the lifecycle."""
    offences = [
        'if record.get("status") == "completed": pass',
        'if fields["status"] != RunStatus.IN_PROGRESS: pass',
        "from exactly_once.ledger.lifecycle import Status",
        "done = stored.fields.get(STATUS) is lifecycle.Status.RELEASED",
        'state = "released" if x else "in_progress"\nif state == "released": pass',
        "if lifecycle.state_of(record, lease) is lifecycle.State.COMPLETED: pass",
        "if state not in (State.COMPLETED, State.EXPIRED): pass",
        "if job_state.state_of(status, 3) is JobState.PAUSING: pass",
    ]
    for source in offences:
        assert list(findings(parse_python(source))), source


def test_the_lifecycle_package_itself_defines_the_states() -> None:
    assert list(findings(parse_python_file(LIFECYCLE / "states.py")))
    assert list(findings(parse_python_file(LIFECYCLE / "job_state.py")))
