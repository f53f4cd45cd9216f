"""infra/'s rooms and the one direction they import in, read from the source.

A room imports only from the rooms before it in ROOMS, so each can be read, tested and
changed knowing only those; an import the type checker alone follows counts too, since it
ties the two rooms together just the same. The Pulumi-free rooms import no Pulumi, so the local
tools and the policy tests read stacks without the engine.
"""

from __future__ import annotations

import ast
from pathlib import Path

from infra.config.schema import REPO_ROOT
from policy.scheduler_guardrails.rules.config.python_source import parse_python_file
from tests.support.python_imports import named_imports
from tools.optional_parts import pruned

INFRA = REPO_ROOT / "infra"
# infra/README.md's table, in order: each room may import the rooms before it.
ROOMS = ("config", "settings", "plan", "resources", "monitoring", "samples", "component")
PULUMI_FREE = ("config", "settings", "plan")
# The program's one reader of `pulumi.Config`, kept beside the settings it builds.
PULUMI_READER = INFRA / "settings" / "from_pulumi.py"
PULUMI_PACKAGES = {"pulumi", "pulumi_gcp", "pulumiverse_time"}


def _room(path: Path) -> str:
    parts = path.relative_to(INFRA).parts
    return parts[0] if len(parts) > 1 else path.stem


def _present_rooms() -> set[str]:
    """The rooms but the component, less one a fork deleted as an optional part
    (tools/optional_parts.py): that one is not missing."""
    return {room for room in ROOMS if room != "component" and not pruned(f"infra/{room}")}


def _modules() -> list[Path]:
    """Every module of a room, and the component (infra/__init__.py holds only a docstring)."""
    return sorted(path for path in INFRA.rglob("*.py") if path != INFRA / "__init__.py")


def test_infra_holds_only_rooms_the_component_and_its_init() -> None:
    top = {path.name for path in INFRA.glob("*.py")}
    rooms = {path.parent.name for path in INFRA.glob("*/__init__.py")}
    assert top == {"__init__.py", "component.py"}
    assert rooms == _present_rooms()


def test_every_room_says_what_it_holds() -> None:
    for room in _present_rooms():
        tree = parse_python_file(INFRA / room / "__init__.py")
        assert ast.get_docstring(tree), f"infra/{room}/__init__.py has no docstring"


def test_rooms_import_in_one_direction() -> None:
    back_edges = []
    for path in _modules():
        here = ROOMS.index(_room(path))
        for name in named_imports(path):
            parts = name.split(".")
            if parts[0] != "infra" or len(parts) < 2 or parts[1] not in ROOMS:
                continue
            if ROOMS.index(parts[1]) > here:
                back_edges.append(f"{path.relative_to(REPO_ROOT)} imports {name}")
    assert back_edges == []


def test_the_pulumi_free_rooms_import_no_pulumi() -> None:
    users = [
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in _modules()
        if _room(path) in PULUMI_FREE and path != PULUMI_READER
        for name in named_imports(path)
        if name.split(".")[0] in PULUMI_PACKAGES
    ]
    assert users == []


def test_the_direction_check_sees_a_back_edge(tmp_path: Path) -> None:
    """The check above must not pass by reading nothing: a module of `config/` importing from
    `settings/` under `if TYPE_CHECKING:` is found."""
    module = tmp_path / "late.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from infra.settings.stack import StackSettings\n"
    )
    assert "infra.settings.stack" in named_imports(module)
    assert ROOMS.index("settings") > ROOMS.index("config")
