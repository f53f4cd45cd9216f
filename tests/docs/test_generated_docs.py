"""The docs state what the code does: every generated table is what `make docs` would write,
and the hand-written tables beside them name exactly what the code defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.config.schema import REPO_ROOT
from infra.settings import jobs as job_config
from policy.scheduler_guardrails.policies import POLICIES
from policy.scheduler_guardrails.rules.config import access as job_access
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KEYS, TARGET_KINDS
from tests.support.sources import git_checkout, python_sources
from tools import doc_texts, docs_tables
from tools.optional_parts import checkout_files, pruned

PAGES = docs_tables.pages()


def _page(name: str) -> str:
    return (REPO_ROOT / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_generated_table_is_what_make_docs_writes(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert docs_tables.render(text) == text, f"{page.name} is out of date: run `make docs`"


def test_make_docs_changes_nothing_the_second_time(tmp_path: Path) -> None:
    stale = _page("docs/stack.md")
    for name in docs_tables.TABLES:
        stale = re.sub(
            rf"(<!-- BEGIN GENERATED: {name} -->\n).*?(<!-- END GENERATED -->)",
            r"\1| stale |\n\2",
            stale,
            flags=re.S,
        )
    for name in docs_tables.FIGURES:
        stale = re.sub(rf"(<!-- BEGIN GENERATED: {name} -->)[^\n]*?(<!-- END GENERATED -->)", r"\1?\2", stale)
    assert "-->?<!--" in stale
    once = docs_tables.render(stale)
    assert once != stale and docs_tables.render(once) == once


def test_every_table_is_shown_once_every_figure_somewhere_and_unknown_blocks_are_refused() -> None:
    def blocks(page: Path) -> list[str]:
        return re.findall(r"<!-- BEGIN GENERATED: ([a-z-]+) -->", page.read_text())

    shown = [name for page in PAGES if page != docs_tables.LIFECYCLE_MODULE for name in blocks(page)]
    assert sorted(name for name in shown if name in docs_tables.TABLES) == sorted(docs_tables.TABLES)
    # The lifecycles' tables are in their package's docstring too, where a reader of the code starts.
    assert blocks(docs_tables.LIFECYCLE_MODULE) == ["lifecycle", "job-lifecycle", "job-lock"]
    assert set(shown) == {*docs_tables.TABLES, *docs_tables.FIGURES}
    with pytest.raises(SystemExit, match="unknown generated block 'nope'"):
        docs_tables.render("<!-- BEGIN GENERATED: nope -->\n<!-- END GENERATED -->\n")
    with pytest.raises(SystemExit, match="'alerts' belongs on lines of its own"):
        docs_tables.render("See <!-- BEGIN GENERATED: alerts --><!-- END GENERATED -->.\n")
    with pytest.raises(SystemExit, match="'alert-count' belongs inside one line"):
        docs_tables.render("<!-- BEGIN GENERATED: alert-count -->\n<!-- END GENERATED -->\n")


def test_the_tables_come_from_the_definitions() -> None:
    stack = _page("docs/stack.md")
    assert "| `functionTimeoutSeconds` | integer | `60` |" in stack
    assert "| `createDatabase` | boolean | derived (see meaning) |" in stack
    assert "| `tokenCheckUri` |" in stack
    assert "| `store_error` | 500 | ERROR |" in _page("docs/deduplication.md")
    assert "| `function-ingress-restricted` | resource | advisory |" in _page("docs/policy.md")
    operations = _page("docs/operations.md")
    assert "| `failed_released` | more than 2 for one job in 15 min |" in operations
    assert "| missed run | any, in 1 h |" in operations
    assert "| `delivery-latency` |" in operations and "`latency_ms`, as a distribution" in operations


def variables_read(function: Path) -> set[str]:
    """Every environment variable the modules of `function` read, by name, from their source:
    the checkout's (python_sources), never a build's stale copy of it."""
    read: set[str] = set()
    for source in python_sources(function):
        text = source.read_text(encoding="utf-8")
        read |= set(re.findall(r'\(env, "([A-Z][A-Z0-9_]+)"', text))
        read |= set(re.findall(r'env(?:iron)?\.get\(\s*"([A-Z][A-Z0-9_]+)"', text))
        read |= set(re.findall(r'(?m)^[A-Z_]*_ENV = "([A-Z][A-Z0-9_]+)"', text))
    return read


def test_the_environment_table_lists_every_variable_the_function_reads() -> None:
    assert {variable.name for variable in doc_texts.FUNCTION_ENVIRONMENT} == variables_read(
        REPO_ROOT / "function"
    )


def test_the_variables_read_are_the_sources_not_a_builds(tmp_path: Path) -> None:
    """`pip wheel ./function` leaves a copy of the package in function/build/lib/, which stays
    as it was when the source moves on: a variable only it reads is read by nothing deployed."""
    git_checkout(tmp_path, {"function/exactly_once/config.py": 'LEASE_ENV = "LEASE_SECONDS"\n'})
    built = tmp_path / "function" / "build" / "lib" / "exactly_once"
    built.mkdir(parents=True)
    (built / "config.py").write_text('LEASE_ENV = "LEASE_SECONDS"\nOLD_ENV = "RENAMED_SINCE"\n')
    assert variables_read(tmp_path / "function") == {"LEASE_SECONDS"}


def test_the_jobs_table_names_every_field_the_parser_accepts() -> None:
    stack = _page("docs/stack.md")
    table = stack.split("## The jobs", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-zA-Z.\[\]]+)` \|", table, flags=re.M))
    nested = ("retry", "catchup", *TARGET_KEYS, "grants")
    accepted = {key for key in job_config._JOB_KEYS if key not in nested}
    accepted |= {f"retry.{key}" for key in job_config.RETRY_KEYS}
    accepted |= {f"catchup.{key}" for key in job_config.CATCHUP_KEYS}
    accepted |= {f"{kind.key}.{key}" for kind in TARGET_KINDS for key in kind.keys}
    accepted |= {f"grants[].{key}" for key in job_access.GRANT_FIELDS}
    assert documented == accepted


def test_the_policy_details_table_names_every_policy() -> None:
    details = _page("docs/policy.md").split("## What each one checks", 1)[1]
    assert set(re.findall(r"^\| `([a-z-]+)` \|", details, flags=re.M)) == {policy.name for policy in POLICIES}


def test_the_readme_is_short_and_starts_a_newcomer() -> None:
    readme = _page("README.md")
    assert len(readme.splitlines()) <= 200
    for command in ("make demo", "make test", "pulumi up", "python -m ops smoke --stack", "@exactly_once"):
        assert command in readme, command
    # The checkout's folders as git sees them: not a virtualenv, nor what a deleted part left.
    top_level = {name.split("/")[0] for name in checkout_files() if "/" in name and not name.startswith(".")}
    assert all(f"`{name}/`" in readme for name in [*top_level, ".github"]), top_level


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            linked = page.parent / target if target else page
            if not linked.exists() and pruned(linked.resolve().relative_to(REPO_ROOT).as_posix()):
                continue  # a fork deleted the optional part the template's page links to
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert broken == []


def test_every_table_is_one_block_with_its_header() -> None:
    """A blank line inside a table ends it: the rows after it render as plain text. So every
    run of table lines outside code blocks starts with a header row and its separator."""
    split = []
    for page in [*PAGES, REPO_ROOT / "README.md", REPO_ROOT / "function" / "README.md"]:
        in_code, previous = False, ""
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if line.startswith("```"):
                in_code = not in_code
            starts_table = line.startswith("|") and not previous.startswith("|")
            if not in_code and starts_table:
                following = lines[number + 1] if number + 1 < len(lines) else ""
                if not re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", following):
                    split.append(f"{page.name}:{number + 1}: {line[:60]}")
            previous = line
    assert split == []
