"""A release is one version, stated where a fork looks for it: the package's `__version__`
(its one definition), the package's metadata and the template's `pyproject.toml` (which read or
repeat it), and CHANGELOG.md, whose newest release must be that version and whose every release
says what a fork must do when it merges it. A clone of the repository carries no tags, so every
release names its last commit, which a fork merges and finds its release by (docs/upgrading.md),
followed here literally on a clone. The license is the Apache License 2.0, named where a reader
or a packaging tool looks."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shlex
import subprocess
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
# How a release's entry names its last commit, opening its summary.
_LAST_COMMIT = re.compile(r"^Last commit: `([0-9a-f]{7,40})`", flags=re.M)
# The first release whose `__version__` is its own (CHANGELOG.md's preamble: earlier ones moved
# no version).
FIRST_VERSIONED_RELEASE = (0, 5, 0)
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


def last_commit(release: Release) -> str | None:
    """The commit `release`'s entry names as its last (`Last commit: `abc1234`.`), if any."""
    found = _LAST_COMMIT.search(release.text)
    return found[1] if found else None


def _pins(path: Path) -> dict[str, str]:
    """name: version of each `name==version` line of a requirements file."""
    lines = (line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return dict(line.split("==", 1) for line in lines if "==" in line)


def test_the_policy_pack_requires_the_function_at_the_packages_version() -> None:
    # The pack's virtualenv installs the function's distribution by this pin, published or not.
    distribution = _project(FUNCTION_DIR / "pyproject.toml")["project"]["name"]
    assert _pins(REPO_ROOT / "policy" / "requirements.txt")[distribution] == exactly_once.__version__


def test_the_pack_tests_with_the_pytest_the_repository_does() -> None:
    pack = _pins(REPO_ROOT / "policy" / "requirements-test.txt")
    assert pack == {"pytest": _pins(REPO_ROOT / "tests" / "requirements-function.txt")["pytest"]}


@pytest.mark.parametrize("release", released(), ids=lambda release: release.name)
def test_every_release_names_its_last_commit(release: Release) -> None:
    """A clone has no tags: the commit is what a fork merges and finds the release by."""
    assert last_commit(release), (
        f"CHANGELOG.md: {release.name} names no last commit (`Last commit: `<commit>`.` opening its summary)"
    )


def test_the_upgrading_page_finds_the_releases_the_changelog_names() -> None:
    """docs/upgrading.md tells a fork's release by the last commit of each release; those must be
    the commits CHANGELOG.md names for the same versions."""
    named = {release.name: commit for release in released() if (commit := last_commit(release))}
    loop = re.search(r"^for release in (.+); do$", UPGRADING.read_text(encoding="utf-8"), flags=re.M)
    assert loop, "docs/upgrading.md lost its loop over the releases' last commits"
    listed = dict(pair.split(":") for pair in loop[1].split())
    assert listed == named and named


def _git(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def _commit_in_history(name: str) -> str | None:
    """`name`'s full commit id when this checkout's history (HEAD's ancestry) holds it."""
    full = _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").stdout.strip()
    return full if full and _git("merge-base", "--is-ancestor", full, "HEAD").returncode == 0 else None


def released_commits() -> dict[str, str]:
    """Each release's last commit, in full, oldest release first. A checkout whose history holds
    none of them has none of the template's history (a shallow CI clone, a copy such as the
    pruned one, a fork begun from a download): the test skips there. One that holds some must
    hold all: a release named by a commit the template never had could not be merged."""
    named = {release.name: last_commit(release) for release in reversed(released())}
    found = {name: _commit_in_history(commit) if commit else None for name, commit in named.items()}
    if not any(found.values()):
        pytest.skip("this checkout's history holds none of the template's commits (shallow, or a copy)")
    missing = {name: named[name] for name, full in found.items() if full is None}
    assert not missing, f"CHANGELOG.md: releases without a last commit HEAD descends from: {missing}"
    return {name: full for name, full in found.items() if full}


def test_each_named_commit_belongs_to_its_release() -> None:
    """Committed on the release's date, in the releases' order, and (from the first release that
    moved the version) with the release's `__version__`: a commit named for the wrong release
    fails, not only a missing one."""
    dates = {release.name: release.date for release in released()}
    commits = released_commits()
    for name, commit in commits.items():
        assert _git("show", "-s", "--format=%cs", commit).stdout.strip() == dates[name], (name, commit)
        if _version_key(name) >= FIRST_VERSIONED_RELEASE:
            package = _git("show", f"{commit}:function/exactly_once/__init__.py").stdout
            assert re.search(rf'^__version__ = "{re.escape(name)}"$', package, flags=re.M), (name, commit)
    ordered = list(commits.values())
    for older, newer in itertools.pairwise(ordered):
        assert _git("merge-base", "--is-ancestor", older, newer).returncode == 0, (older, newer)


def _page_blocks(heading: str) -> list[str]:
    """The `sh` blocks of docs/upgrading.md's section `## heading`, as a reader copies them."""
    section = UPGRADING.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```", section, flags=re.M | re.S)


# The template's address on the page, which the test replaces by its copy of the template.
TEMPLATE_URL = "https://github.com/<owner>/<template>.git"
# Where the page says to put a release's last commit.
COMMIT_PLACEHOLDER = "<last commit>"


def _shell(script: str, cwd: Path, env: dict[str, str]) -> str:
    """`script` run by bash in `cwd`, stopping at the first command that fails; its output."""
    result = subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"{script}\n{result.stdout}{result.stderr}"
    return result.stdout


def _releases_in(fork: Path, env: dict[str, str]) -> list[str]:
    """What the page's loop over the releases' last commits says of `fork`."""
    (loop,) = [block for block in _page_blocks("Which release a fork is on") if block.startswith("for ")]
    result = subprocess.run(
        ["bash", "-c", loop], cwd=fork, env=env, capture_output=True, text=True, check=False
    )
    return re.findall(r"^at least (\S+)$", result.stdout, flags=re.M)


def test_a_fork_cloned_without_tags_takes_each_release_by_the_pages_commands(tmp_path: Path) -> None:
    """The template as published (this checkout's HEAD as `main`, no tags) and a fork cloned
    from it three releases ago, with a job of its own committed. Then docs/upgrading.md's
    commands, as written: the remote, each later release merged by the commit the changelog
    names, then `template/main`; the page's loop over the releases says where the fork stands
    after each."""
    commits = released_commits()
    names = list(commits)
    assert len(names) >= 3, "the test starts a fork two releases behind the newest"
    start = names[-3]
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "A forker",
        "GIT_AUTHOR_EMAIL": "forker@localhost",
        "GIT_COMMITTER_NAME": "A forker",
        "GIT_COMMITTER_EMAIL": "forker@localhost",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_MERGE_AUTOEDIT": "no",
    }
    template, then = tmp_path / "template.git", tmp_path / "template-then.git"
    for bare, head in ((template, "HEAD"), (then, commits[start])):
        _shell(f"git init -q --bare -b main {shlex.quote(str(bare))}", tmp_path, env)
        _shell(f"git fetch -q --no-tags {shlex.quote(str(REPO_ROOT))} {head}:refs/heads/main", bare, env)
    fork = tmp_path / "fork"
    _shell(f"git clone -q --no-tags {shlex.quote(str(then))} {shlex.quote(str(fork))}", tmp_path, env)
    (fork / "function" / "jobs" / "forks_own.py").write_text('"""A job of the fork\'s own."""\n')
    _shell("git add function/jobs/forks_own.py && git commit -q -m 'a job of our own'", fork, env)
    assert _releases_in(fork, env) == names[: names.index(start) + 1]

    (remote,) = _page_blocks("Once: the template as a remote")
    assert TEMPLATE_URL in remote, f"docs/upgrading.md's remote is no longer {TEMPLATE_URL}"
    _shell(remote.replace(TEMPLATE_URL, shlex.quote(str(template))), fork, env)
    take_main, take_release = _page_blocks("Merging a release")
    # Several releases behind, as the page says: the branch, each release in turn, then main.
    (merge_main,) = [line for line in take_main.splitlines() if line.startswith("git merge")]
    _shell(take_main.replace(merge_main, ""), fork, env)
    assert COMMIT_PLACEHOLDER in take_release, f"docs/upgrading.md merges no {COMMIT_PLACEHOLDER}"
    for name in names[names.index(start) + 1 :]:
        _shell(take_release.replace(COMMIT_PLACEHOLDER, commits[name]), fork, env)
        assert _releases_in(fork, env)[-1] == name
    _shell(merge_main, fork, env)
    assert _git("rev-parse", "template/main", cwd=fork).stdout == _git("rev-parse", "HEAD").stdout
    assert _git("merge-base", "--is-ancestor", "template/main", "HEAD", cwd=fork).returncode == 0
    assert (fork / "function" / "jobs" / "forks_own.py").is_file()
    assert _git("branch", "--show-current", cwd=fork).stdout.strip() == "upgrade-template"
    assert _git("tag", cwd=fork).stdout == ""


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


def test_the_function_ships_the_license_it_is_under() -> None:
    """function/ is built into a wheel on its own (`pip install ./function`), where the
    repository's LICENSE is out of reach: it holds a copy, the same bytes, which its
    pyproject.toml names for the wheel's metadata."""
    assert (FUNCTION_DIR / "LICENSE").read_bytes() == (REPO_ROOT / "LICENSE").read_bytes()
    assert _project(FUNCTION_DIR / "pyproject.toml")["project"]["license-files"] == ["LICENSE"]


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
