"""A release is one version, stated where a fork looks for it: the package's `__version__`
(its one definition), the package's metadata and the template's `pyproject.toml` (which read or
repeat it), and CHANGELOG.md, whose newest release must be that version and whose every release
says what a fork must do when it merges it. The license is the Apache License 2.0, named where a
reader or a packaging tool looks."""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

import exactly_once

REPO_ROOT = Path(__file__).resolve().parents[1]
FUNCTION_DIR = REPO_ROOT / "function"
CHANGELOG = REPO_ROOT / "CHANGELOG.md"
UPGRADING = REPO_ROOT / "docs" / "upgrading.md"

# Keep a Changelog 1.1.0's kinds of change, and the section this template adds to each release.
CHANGE_KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
UPGRADING_SECTION = "Upgrading"
_RELEASE_HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\S+))?$")
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# The Apache License 2.0 as the Apache Software Foundation publishes it (LICENSE-2.0.txt),
# appendix included: any edit to the text makes it something other than that license.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


@dataclass(frozen=True)
class Release:
    name: str
    date: str | None
    sections: dict[str, str]
    text: str


def _project(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        return tomllib.load(file)


def releases() -> list[Release]:
    """CHANGELOG.md's `## [...]` entries in file order, each with its `### ...` sections."""
    text = CHANGELOG.read_text(encoding="utf-8")
    found: list[Release] = []
    for block in re.split(r"^(?=## )", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        match = _RELEASE_HEADING.match(heading)
        assert match, f"CHANGELOG.md: a release heading must be '## [X.Y.Z] - YYYY-MM-DD', not {heading!r}"
        parts = re.split(r"^### (.+)$", body, flags=re.M)
        sections = {
            title.strip(): content.strip() for title, content in zip(parts[1::2], parts[2::2], strict=True)
        }
        found.append(Release(match["name"], match["date"], sections, body))
    return found


def released() -> list[Release]:
    return [release for release in releases() if release.name != "Unreleased"]


def _version_key(name: str) -> tuple[int, ...]:
    match = _VERSION.match(name)
    assert match, f"CHANGELOG.md: {name!r} is not a version X.Y.Z"
    return tuple(int(part) for part in match.groups())


def test_the_changelog_opens_with_unreleased_then_every_release_newest_first() -> None:
    entries = releases()
    assert entries and entries[0].name == "Unreleased" and entries[0].date is None
    assert [entry.name for entry in entries].count("Unreleased") == 1
    versions = [_version_key(release.name) for release in released()]
    assert versions, "CHANGELOG.md names no release"
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    dates = []
    for release in released():
        assert release.date, f"CHANGELOG.md: {release.name} has no date"
        dates.append(date.fromisoformat(release.date))
    assert dates == sorted(dates, reverse=True), "release dates must not go up as versions go down"


@pytest.mark.parametrize("release", released(), ids=lambda release: release.name)
def test_every_release_says_what_changed_and_what_a_fork_must_do(release: Release) -> None:
    unknown = set(release.sections) - CHANGE_KINDS - {UPGRADING_SECTION}
    assert not unknown, f"{release.name}: sections {sorted(unknown)} are not Keep a Changelog's"
    assert set(release.sections) & CHANGE_KINDS, f"{release.name} lists no change"
    assert release.sections.get(UPGRADING_SECTION), f"{release.name} has no Upgrading section"
    empty = [title for title, content in release.sections.items() if not content]
    assert not empty, f"{release.name}: empty sections {empty} (an Upgrading with nothing says 'Nothing.')"


def test_the_newest_release_is_the_packages_version() -> None:
    assert released()[0].name == exactly_once.__version__


def test_the_version_is_defined_once_in_the_package() -> None:
    assignments = [
        path.relative_to(REPO_ROOT)
        for path in (FUNCTION_DIR / "exactly_once").rglob("*.py")
        if re.search(r"^__version__\s*=", path.read_text(encoding="utf-8"), flags=re.M)
    ]
    assert assignments == [Path("function/exactly_once/__init__.py")]
    package = _project(FUNCTION_DIR / "pyproject.toml")
    assert "version" not in package["project"] and "version" in package["project"]["dynamic"]
    assert package["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "exactly_once.__version__"}


def test_the_templates_version_is_the_packages() -> None:
    assert _project(REPO_ROOT / "pyproject.toml")["project"]["version"] == exactly_once.__version__


def test_the_policy_packs_version_is_the_packages() -> None:
    """`pulumi preview --policy-pack policy` names the pack's version: the template's."""
    pack = yaml.safe_load((REPO_ROOT / "policy" / "PulumiPolicy.yaml").read_text(encoding="utf-8"))
    assert pack["version"] == exactly_once.__version__


def test_the_upgrading_page_finds_the_releases_the_changelog_names() -> None:
    """docs/upgrading.md tells a fork's release by the last commit of each untagged release;
    those must be the commits CHANGELOG.md names for the same versions."""
    named = {}
    for release in released():
        last = re.search(r"^Last commit: `([0-9a-f]{7,40})`", release.text, flags=re.M)
        if last:
            named[release.name] = last[1]
    loop = re.search(r"^for release in (.+); do$", UPGRADING.read_text(encoding="utf-8"), flags=re.M)
    assert loop, "docs/upgrading.md lost its loop over the releases' last commits"
    listed = dict(pair.split(":") for pair in loop[1].split())
    assert listed == named and named


def test_the_license_is_the_apache_license_2_0() -> None:
    text = (REPO_ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256, (
        "LICENSE is not the standard Apache 2.0 text"
    )


def test_the_license_is_named_in_the_readme_and_the_metadata() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "Apache License 2.0 ([LICENSE](LICENSE))" in readme
    for path in (REPO_ROOT / "pyproject.toml", FUNCTION_DIR / "pyproject.toml"):
        assert _project(path)["project"]["license"] == "Apache-2.0", path
    # An SPDX expression in `license` (PEP 639) is read from setuptools 77 on; an older one
    # refuses the project.
    requires = _project(FUNCTION_DIR / "pyproject.toml")["build-system"]["requires"]
    floor = next(
        re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", spec)
        for spec in requires
        if spec.startswith("setuptools")
    )
    assert floor and int(floor[1]) >= 77, requires


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_in_the_changelog_resolves() -> None:
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", CHANGELOG.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        linked = REPO_ROOT / target if target else CHANGELOG
        if not linked.exists() or (anchor and anchor not in _anchors(linked)):
            broken.append(f"{target}#{anchor}")
    assert broken == []
