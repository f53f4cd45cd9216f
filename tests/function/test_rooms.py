"""exactly_once's rooms and the one direction they import in, read from the source.

The rooms, their order and what each holds are function/README.md's table, read here: the
table is the one place a reader and this test take them from. A room imports only from the
rooms before it, no module imports itself back through others, and the core never imports an
extension nor names a module of the application's `jobs/` package. Every import counts,
wherever it stands: one under `if TYPE_CHECKING:` ties two modules together for the type
checker just the same, and one inside a function ties them together at run time.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.sources import python_sources

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTION = REPO_ROOT / "function"
PACKAGE = FUNCTION / "exactly_once"
README = FUNCTION / "README.md"
ROOMS_HEADING = "## The rooms"
EXTENSION = "(extension)"


# A default that names the stack's demo job: the one literal of the core naming `jobs/`, kept
# while the configuration still has a default handler.
@dataclass(frozen=True)
class Room:
    name: str
    holds: tuple[str, ...]  # paths under exactly_once/: "ledger/" for a package, "errors.py"
    extension: bool


def rooms_from_readme(text: str) -> list[Room]:
    """The table under ROOMS_HEADING, in order."""
    section = text.split(ROOMS_HEADING, 1)[1].split("\n## ", 1)[0]
    rooms = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"\d+\.\s+(\w+)(\s+\(extension\))?", cells[0]) if len(cells) == 3 else None
        if match is None:
            continue
        holds = tuple(re.findall(r"`([\w/]+(?:\.py|/))`", cells[1]))
        rooms.append(Room(match.group(1), holds, bool(match.group(2))))
    return rooms


ROOMS = rooms_from_readme(README.read_text(encoding="utf-8"))


def module_name(path: Path) -> str:
    parts = path.relative_to(FUNCTION).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in python_sources(PACKAGE)}


def room_of(path: Path) -> Room:
    inside = path.relative_to(PACKAGE).as_posix()
    found = [
        room
        for room in ROOMS
        for held in room.holds
        if inside == held or (held.endswith("/") and inside.startswith(held))
    ]
    assert len(found) == 1, f"exactly_once/{inside} is in {len(found)} rooms of function/README.md's table"
    return found[0]


def imported(tree: ast.Module, known: dict[str, Path]) -> set[str]:
    """Every module of the package `tree` names in an import, wherever the import stands: for
    `from a import b`, `a.b` when that is a module, else `a`. The package itself (`from
    exactly_once import log_fields`) counts only through the modules it names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(known)
            names.update(submodules)
            if len(submodules) < len(node.names) and node.module != "exactly_once":
                names.add(node.module)
    return {name for name in names if name in known and name != "exactly_once"}


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {
        name: imported(ast.parse(path.read_text(encoding="utf-8")), modules) for name, path in modules.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in edges.get(node, ()):
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_readme_names_the_rooms_and_places_every_module() -> None:
    assert [room.name for room in ROOMS] == [
        "shared",
        "ledger",
        "job",
        "delivery",
        "serving",
        "token_check",
        "targets",
        "audit",
        "testing",
    ]
    assert [room.name for room in ROOMS if room.extension] == ["token_check", "targets", "audit", "testing"]
    for path in MODULES.values():
        room_of(path)


def test_no_module_imports_itself_back() -> None:
    assert cycles(graph(MODULES)) == []


def test_rooms_import_in_one_direction() -> None:
    order = {room.name: number for number, room in enumerate(ROOMS)}
    edges = graph(MODULES)
    back_edges = [
        f"{name} ({room_of(path).name}) imports {target} ({room_of(MODULES[target]).name})"
        for name, path in MODULES.items()
        for target in edges[name]
        if order[room_of(MODULES[target]).name] > order[room_of(path).name]
    ]
    assert back_edges == []


def test_the_core_imports_no_extension() -> None:
    edges = graph(MODULES)
    leaks = [
        f"{name} imports {target}"
        for name, path in MODULES.items()
        if not room_of(path).extension
        for target in edges[name]
        if room_of(MODULES[target]).extension
    ]
    assert leaks == []


def test_the_core_names_no_module_of_the_jobs_package() -> None:
    named = [
        (path.relative_to(PACKAGE).as_posix(), node.value)
        for path in MODULES.values()
        if not room_of(path).extension
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("jobs.")
    ]
    assert named == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "if TYPE_CHECKING:\n    from exactly_once.audit.run import run_audit\n",
            {"exactly_once.audit.run"},
        ),
        ("def later():\n    import exactly_once.targets.errors\n", {"exactly_once.targets.errors"}),
        ("from exactly_once import log_fields, RunContext\n", {"exactly_once.log_fields"}),
        ("from exactly_once.ledger import lifecycle\n", {"exactly_once.ledger.lifecycle"}),
        ("from exactly_once.ledger.store import RunStore\n", {"exactly_once.ledger.store"}),
    ],
)
def test_the_checks_see_every_kind_of_import(source: str, expected: set[str]) -> None:
    """The checks must not pass by reading nothing: an import under TYPE_CHECKING, one inside
    a function and one of a module through its package are all seen."""
    assert imported(ast.parse(source), MODULES) == expected


def test_the_cycle_check_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_direction_check_places_a_late_room_after_an_early_one() -> None:
    order = [room.name for room in ROOMS]
    assert order.index("ledger") < order.index("delivery") < order.index("audit")
    assert room_of(PACKAGE / "ledger" / "store.py").name == "ledger"
    assert room_of(PACKAGE / "run_key.py").name == "shared"
