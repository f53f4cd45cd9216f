"""A job's dependencies are declared where the deployment installs them: every distribution a
module under function/ imports is pinned in function/requirements.txt, or installed by one that
is. An import that is not would pass on this machine and fail on the instance's first start."""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from infra.config.schema import REPO_ROOT
from tests.support.python_imports import FUNCTION, FUNCTION_ROOTS, imports_of, is_stdlib

REQUIREMENTS = FUNCTION / "requirements.txt"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    """Distribution -> version, for every `name==version` line of function/requirements.txt."""
    pins = {}
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            pins[_normal(requirement.name)] = specifier.version
    return pins


@cache
def _requires(distribution: str) -> frozenset[str]:
    """Every distribution `distribution` installs, itself included (extras left out)."""
    found = {distribution}
    for raw in metadata.requires(distribution) or []:
        requirement = Requirement(raw)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            name = _normal(requirement.name)
            if name not in found:
                found |= _requires(name)
    return frozenset(found)


@cache
def _owners() -> dict[Path, str]:
    """Installed file -> its distribution."""
    owners = {}
    for distribution in metadata.distributions():
        for file in distribution.files or []:
            owners[Path(str(distribution.locate_file(file))).resolve()] = _normal(
                distribution.metadata["Name"]
            )
    return owners


NAMESPACE = "a namespace package"


def _distribution_of(module: str) -> str | None:
    """The distribution that installed `module`; NAMESPACE for a namespace package such as
    `google.cloud`, which many distributions share (their own modules are checked)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    if spec is not None and spec.origin in (None, "namespace") and spec.submodule_search_locations:
        return NAMESPACE
    if spec is None or spec.origin is None:
        return None
    return _owners().get(Path(spec.origin).resolve())


def test_every_pin_is_exact_and_installed_at_its_version() -> None:
    pins = pinned()
    assert {"google-cloud-run", "google-cloud-bigquery", "functions-framework"} <= set(pins)
    for name, version in pins.items():
        assert metadata.version(name) == version, name


def test_every_import_under_function_is_pinned_or_installed_by_a_pin() -> None:
    installed = frozenset().union(*(_requires(name) for name in pinned()))
    undeclared = set()
    for path in FUNCTION.rglob("*.py"):
        for module in imports_of(path):
            if is_stdlib(module) or module.split(".")[0] in FUNCTION_ROOTS:
                continue
            distribution = _distribution_of(module)
            if distribution != NAMESPACE and (distribution is None or distribution not in installed):
                undeclared.add(
                    f"{path.relative_to(REPO_ROOT)} imports {module} ({distribution or 'not installed'})"
                )
    assert undeclared == set()


def test_an_unpinned_import_is_caught() -> None:
    """Guards the test above: a distribution installed here (pytest) but not for the function."""
    assert _distribution_of("pytest") == "pytest"
    installed = frozenset().union(*(_requires(name) for name in pinned()))
    assert "pytest" not in installed and "google-cloud-run" in installed
