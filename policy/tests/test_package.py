"""The pack's package stands alone, read from its source: it imports nothing of the repository
outside this directory (`pulumi policy publish` uploads the directory alone) and nothing its
requirements do not install, and its shared rules import in one direction, room by room.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PACK = Path(__file__).resolve().parents[1]
PACKAGE = PACK / "scheduler_guardrails"
RULES = PACKAGE / "rules"
# Top-level names of what requirements.txt and requirements-test.txt install that the pack
# imports: the SDKs (protobuf under `google`, as pulumi_policy's analyzer uses it), the
# function's distribution, and pytest for the tests.
REQUIRED = {"pulumi", "pulumi_policy", "google", "exactly_once", "pytest"}
# rules/__init__.py's order: a room imports only those before it.
RULE_ROOMS = ("timing", "config", "targets", "environment_size")


def _modules(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "venv" not in path.relative_to(PACK).parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(level, module) of each import anywhere in `path`: level 0 is absolute, and a relative
    import is resolved against `path`'s package within the pack, as dotted parts under PACK."""
    package = list(path.relative_to(PACK).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield 0, node.module
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - node.level + 1]
            yield node.level, ".".join([*base, *(node.module.split(".") if node.module else [])])


def test_the_pack_imports_only_itself_the_standard_library_and_its_requirements() -> None:
    foreign = {
        f"{path.relative_to(PACK)}: {name}"
        for path in _modules(PACK)
        for level, name in _imports(path)
        if level == 0
        and name.split(".")[0] not in sys.stdlib_module_names | REQUIRED | {"__future__"}
        and not (path.name == "__main__.py" and name.split(".")[0] == PACKAGE.name)
    }
    assert foreign == set()


def test_relative_imports_stay_inside_the_pack() -> None:
    escaping = {
        f"{path.relative_to(PACK)}: {'.' * level}"
        for path in _modules(PACK)
        for level, _ in _imports(path)
        # one level more than its folders' depth is the pack's own directory, as a package
        if level > len(path.relative_to(PACK).parent.parts) + 1
    }
    assert escaping == set()


def _rule_room(path: Path) -> str:
    return path.relative_to(RULES).parts[0].removesuffix(".py")


def test_the_rules_import_in_one_direction_and_never_the_pack() -> None:
    wrong = []
    for path in _modules(RULES):
        if path.parent == RULES and path.name == "__init__.py":
            continue
        here = RULE_ROOMS.index(_rule_room(path))
        for level, name in _imports(path):
            parts = name.split(".")
            if level == 0:
                continue
            if parts[:2] != [PACKAGE.name, RULES.name]:
                wrong.append(f"{path.relative_to(PACK)} imports {name}, outside the rules")
            elif len(parts) > 2 and RULE_ROOMS.index(parts[2]) > here:
                wrong.append(f"{path.relative_to(PACK)} imports {name}, a later room")
    assert wrong == []


def test_the_direction_check_resolves_relative_imports() -> None:
    """The checks above must not pass by reading nothing: a relative import two levels up is
    found as the module it names."""
    imports = dict((name, level) for level, name in _imports(RULES / "targets" / "registry.py"))
    assert imports.get(f"{PACKAGE.name}.rules.config.problems") == 2
