"""Every file and module the docs name exists: a page that sends the reader to a moved or
renamed module is wrong, however right the rest of it is.

Read are the inline code spans of the README, function/README.md and docs/: a path of the
repository (`infra/resources/source.py`), a path inside function/ (`exactly_once/ledger/`,
`jobs/demo.py`), and a dotted name in the package (`exactly_once.ledger.store`,
`exactly_once.firestore_client()`). Fenced code blocks are examples, not references.
"""

from __future__ import annotations

import functools
import importlib
import re
import subprocess
from pathlib import Path

import pytest

from infra.config.schema import FUNCTION_DIR, REPO_ROOT
from tests.support.sources import git_checkout
from tools.optional_parts import checkout_files, pruned

PAGES = sorted([REPO_ROOT / "README.md", FUNCTION_DIR / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
_FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"`([^`\n]+)`")
_REPO_PATH = re.compile(r"^(?:function|infra|policy|ops|localrun|bench|tests|tools|bootstrap|docs)/[\w./-]*$")
_FUNCTION_PATH = re.compile(r"^(?:jobs|exactly_once)/[\w./-]*$")
_PACKAGE_NAME = re.compile(r"^exactly_once(?:\.\w+)+(?:\(\))?$")
# Made on the reader's machine, never in the repository: the policy pack's own virtualenv.
_LOCAL_ONLY = ("policy/venv",)


@functools.cache
def _checkout_paths() -> frozenset[str]:
    """Every file of the checkout as git sees it, and every folder holding one: what a reference
    may name. A folder that `git rm -r` left holding only compiled modules is not one."""
    files = checkout_files(REPO_ROOT)
    folders = {name.rsplit("/", depth)[0] for name in files for depth in range(1, name.count("/") + 1)}
    return frozenset({*files, *folders})


def _references(page: Path) -> list[str]:
    return _SPAN.findall(_FENCED.sub("", page.read_text(encoding="utf-8")))


def _resolves(name: str) -> bool:
    """`exactly_once.a.b`: a module, or an attribute of the longest module prefix."""
    parts = name.removesuffix("()").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_file_and_module_a_page_names_exists(page: Path) -> None:
    missing = []
    for reference in _references(page):
        if _REPO_PATH.match(reference) and not reference.startswith(_LOCAL_ONLY):
            # A fork that deleted an optional part keeps the pages that describe the template.
            found = reference.rstrip("/") in _checkout_paths() or pruned(reference.rstrip("/"))
        elif _FUNCTION_PATH.match(reference):
            path = f"function/{reference.rstrip('/')}"
            found = path in _checkout_paths() or pruned(path)
        elif _PACKAGE_NAME.match(reference):
            found = _resolves(reference)
        else:
            continue
        if not found:
            missing.append(reference)
    assert missing == []


def test_the_check_reads_references_and_would_see_a_stale_one(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "See `function/exactly_once/ledger/store.py`, `exactly_once.ledger.fields.EXPIRE_AT` and\n"
        "`jobs/errors.py`.\n\n```python\n# `infra/gone.py` in an example is not a reference\n```\n"
    )
    references = _references(page)
    assert references == [
        "function/exactly_once/ledger/store.py",
        "exactly_once.ledger.fields.EXPIRE_AT",
        "jobs/errors.py",
    ]
    assert (FUNCTION_DIR / "jobs" / "errors.py").exists() is False
    assert _resolves("exactly_once.ledger.fields.EXPIRE_AT")


def test_a_reference_into_a_deleted_optional_part_is_not_stale(tmp_path: Path) -> None:
    git_checkout(tmp_path, {"bench/run.py": "", "bootstrap/__main__.py": ""})
    subprocess.run(["git", "rm", "-r", "-q", "bootstrap"], cwd=tmp_path, check=True)
    # What a checkout that ran keeps of a deleted part: git ignores it, and so does the check.
    (tmp_path / "bootstrap" / "__pycache__").mkdir(parents=True)
    assert pruned("bench/run.py", root=tmp_path) is False
    assert pruned("bootstrap/__main__.py", root=tmp_path) is True
    assert pruned("infra/component.py", root=tmp_path) is False
    assert not _resolves("exactly_once.run_store.store_deadline_for")
    assert not _resolves("exactly_once.ledger.store.no_such_name")
