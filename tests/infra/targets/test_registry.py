"""The target kinds' registry is the only list of them: every kind module is in it, nothing
else in the repository enumerates kinds, and the docs' walk-through of a new kind stays short."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest

from infra.config.schema import REPO_ROOT
from policy.scheduler_guardrails.rules import targets
from policy.scheduler_guardrails.rules.config.python_source import parse_python_file
from policy.scheduler_guardrails.rules.targets import registry
from policy.scheduler_guardrails.rules.targets.kind import TargetKind
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS, kind_for_handler
from tests.support.optional import needs_proxy_kinds
from tests.support.sources import python_sources
from tools.optional_parts import OPTIONAL_PARTS

TARGETS = Path(targets.__file__).parent
NOT_KINDS = {"__init__", "kind", "registry"}
# Where code that could enumerate kinds lives (tests may list them: they are the oracle).
SCANNED = ("infra", "policy", "tools", "localrun", "ops", "bench", "bootstrap")
# The names the template's code gives the proxies' handlers, by which a list could name kinds.
TEMPLATE_HANDLER_NAMES = frozenset({"WORKFLOWS_HANDLER", "CLOUD_RUN_HANDLER", "BIGQUERY_HANDLER"})


def _handler_constants() -> frozenset[str]:
    """The template's names, and every name a present kind's module gives its handler."""
    defined = {
        name
        for kind in TARGET_KINDS
        for name, value in vars(sys.modules[type(kind).__module__]).items()
        if name.endswith("HANDLER") and value == kind.handler
    }
    return TEMPLATE_HANDLER_NAMES | defined


HANDLER_CONSTANTS = _handler_constants()


def test_every_kind_module_is_registered_once() -> None:
    modules = sorted(path.stem for path in TARGETS.glob("*.py") if path.stem not in NOT_KINDS)
    kinds = [importlib.import_module(f"{targets.__name__}.{module}").KIND for module in modules]
    assert all(isinstance(kind, TargetKind) for kind in kinds)
    assert sorted(map(id, kinds)) == sorted(map(id, TARGET_KINDS))
    assert len({kind.key for kind in TARGET_KINDS}) == len(TARGET_KINDS)


def test_a_deleted_kind_module_leaves_the_others_found_in_their_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not TARGET_KINDS:
        pytest.skip("this checkout has no target kind to delete")
    # The package as a fork that deleted the last kind's module has it (the modules themselves
    # are the ones already imported: only what the folder holds decides which are found).
    *kept, deleted = TARGET_KINDS
    for module in ("kind", "registry", *(type(kind).__module__.rpartition(".")[2] for kind in kept)):
        shutil.copy(TARGETS / f"{module}.py", tmp_path)
    monkeypatch.setattr(targets, "__path__", [str(tmp_path)])
    assert registry.found_kinds() == tuple(kept)
    assert deleted not in registry.found_kinds()


def test_every_proxy_handler_the_function_names_belongs_to_one_kind() -> None:
    """The proxy jobs the function ships for the kinds (function/jobs/) are the kinds' handler
    modules, one each: a fork that deletes the kinds deletes both sides together."""
    (kinds,) = [part for part in OPTIONAL_PARTS if part.name == "the proxy kinds"]
    shipped = [
        f"jobs.{Path(path).stem}"
        for path in kinds.paths
        if path.startswith("function/jobs/") and (REPO_ROOT / path).exists()
    ]
    assert sorted(kind.handler_module for kind in TARGET_KINDS) == sorted(shipped)
    assert all(kind_for_handler(kind.handler) is kind for kind in TARGET_KINDS)


def _enumerations(path: Path) -> list[str]:
    """Collections in `path` naming two or more kinds: by config key, handler or handler name."""
    keys = {kind.key for kind in TARGET_KINDS}
    handlers = {kind.handler for kind in TARGET_KINDS} | {kind.handler_module for kind in TARGET_KINDS}
    found = []
    for node in ast.walk(parse_python_file(path)):
        if not isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
            continue
        items = node.keys if isinstance(node, ast.Dict) else node.elts
        strings = {
            item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)
        }
        named = {
            item.id if isinstance(item, ast.Name) else item.attr
            for item in items
            if isinstance(item, ast.Name | ast.Attribute)
        }
        if len(strings & keys) > 1 or len(strings & handlers) > 1 or len(named & HANDLER_CONSTANTS) > 1:
            found.append(f"{path}:{node.lineno}")
    return found


def test_nothing_but_the_registry_lists_the_kinds() -> None:
    listed = [
        where
        for folder in SCANNED
        for path in python_sources(REPO_ROOT / folder)
        if path.parent != TARGETS
        for where in _enumerations(path)
    ]
    assert listed == []


@pytest.mark.parametrize(
    ("source", "lists"),
    [
        # Config keys are the kinds' own: with the kinds deleted, no key names one.
        pytest.param(
            'NESTED = ("retry", "cloudRunJob", "bigquery")\n'
            "PROXIES = (CLOUD_RUN_HANDLER, BIGQUERY_HANDLER)\n",
            2,
            marks=needs_proxy_kinds,
            id="keys-and-handler-names",
        ),
        # The template's names for the proxies' handlers are known without the kinds.
        pytest.param("PROXIES = (CLOUD_RUN_HANDLER, BIGQUERY_HANDLER)\n", 1, id="handler-names"),
    ],
)
def test_the_scan_finds_a_second_list(tmp_path: Path, source: str, lists: int) -> None:
    module = tmp_path / "second_list.py"
    module.write_text(source)
    assert len(_enumerations(module)) == lists


def test_the_walk_through_of_a_new_kind_names_at_most_five_files() -> None:
    page = (REPO_ROOT / "docs" / "proxy.md").read_text(encoding="utf-8")
    section = page.split("## Adding a target kind", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. .*$", section, flags=re.M)
    files = {name for step in steps for name in re.findall(r"`([\w./<>-]+\.(?:py|md))`", step)}
    assert steps and 0 < len(files) <= 5, files
