"""mypy reads the pulumi_gcp services the code uses, and only those (pyproject.toml): a use of a
service it skips would be typed Any, unchecked. Read from the source (nothing is imported to
check): every `gcp.<name>` of a module that imports pulumi_gcp as `gcp`, every import of
pulumi_gcp's modules, across the repository's Python."""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path

from infra.config.paths import REPO_ROOT
from policy.scheduler_guardrails.rules.config.python_source import parse_python_file
from tests.support.sources import python_sources

PACKAGE = "pulumi_gcp"


def _followed() -> set[str]:
    """The pulumi_gcp module patterns pyproject.toml has mypy follow."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {
        pattern
        for override in config["tool"]["mypy"]["overrides"]
        if override.get("follow_imports") == "normal"
        for pattern in override["module"]
        if pattern.split(".")[0] == PACKAGE
    }


def _package_modules() -> set[str]:
    """The names of pulumi_gcp's own modules and subpackages (its services)."""
    spec = importlib.util.find_spec(PACKAGE)
    assert spec and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    return {path.stem for path in folder.iterdir() if path.suffix == ".py" or (path / "__init__.py").exists()}


def _used(tree: ast.AST) -> set[str]:
    """The first name after `pulumi_gcp.` of each of the package's modules `tree` reaches."""
    aliases = {PACKAGE}
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    aliases.add(alias.asname or PACKAGE)
                    used.update(alias.name.split(".")[1:2])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            parts = node.module.split(".")
            used.update(parts[1:2] if len(parts) > 1 else [alias.name for alias in node.names])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used.add(node.attr)
    return used


def test_every_pulumi_gcp_service_the_code_uses_is_type_checked() -> None:
    modules = _package_modules()
    assert {"projects", "cloudrunv2", "provider"} <= modules
    followed = _followed()
    unchecked = sorted(
        f"{PACKAGE}.{name} in {path.relative_to(REPO_ROOT)}"
        for path in python_sources(REPO_ROOT)
        for name in _used(parse_python_file(path))
        if name in modules and not {f"{PACKAGE}.{name}", f"{PACKAGE}.{name}.*"} & followed
    )
    assert unchecked == [], "add these to pyproject.toml's followed pulumi_gcp modules"


def test_the_reader_sees_each_way_of_reaching_a_service() -> None:
    tree = ast.parse(
        "import pulumi_gcp as gcp\nimport pulumi_gcp.kms\nfrom pulumi_gcp.compute import Network\n"
        "from pulumi_gcp import dns\nx = gcp.sql.DatabaseInstance\ny = gcp.Provider\n"
    )
    assert _used(tree) == {"kms", "compute", "dns", "sql", "Provider"}
