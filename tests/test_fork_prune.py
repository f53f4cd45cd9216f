"""A fork may delete each optional part (tools/optional_parts.py) with `git rm -r` and stay green.

Two halves. Read from the source: nothing outside a part imports it, at any depth of the code
(inside functions and under TYPE_CHECKING too), nor names one of its modules in a string (a
`python -m` line, a "module:function" path), so deleting one part alone breaks nothing another
file needs. Run on a copy with every part deleted: `make check`, every remaining test module
collected (each imports), the docs' tests, the linters and `make demo`, as the fork would run
them. The rest of `make test` exercises code no part provides.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config.paths import REPO_ROOT
from infra.config.python_source import parse_python_file
from tests.support.checkout import copy_checkout
from tests.support.python_imports import named_imports
from tools.optional_parts import OPTIONAL_PARTS, OptionalPart, part_of

TIMEOUT_SECONDS = 900


def _module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _python_files() -> list[str]:
    listing = ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"]
    names = subprocess.run(listing, cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()
    return sorted(name for name in names if (REPO_ROOT / name).is_file())


def _names(path: Path) -> list[str]:
    """Every module an import in `path` names, and every string that could name one."""
    strings = [
        node.value.partition(":")[0]
        for node in ast.walk(parse_python_file(path))
        # A dotted module path (`-m localrun.soak`, "bench.run:main"); a bare word such as
        # "bench" is as likely a folder's name, which the run on the pruned copy covers.
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value
    ]
    return [*named_imports(path), *strings]


def _reaches(name: str, part: OptionalPart) -> bool:
    modules = [_module_name(path) for path in part.paths if not path.endswith(".yaml")]
    return any(name == module or name.startswith(f"{module}.") for module in modules)


@pytest.mark.parametrize("part", OPTIONAL_PARTS, ids=lambda part: part.name)
def test_nothing_outside_an_optional_part_names_its_modules(part: OptionalPart) -> None:
    assert all((REPO_ROOT / path).exists() for path in part.paths), "the template ships every optional part"
    reaching = sorted(
        f"{name} in {file}"
        for file in _python_files()
        if part_of(file) is not part
        for name in _names(REPO_ROOT / file)
        if _reaches(name, part)
    )
    assert reaching == []


def test_the_check_would_see_an_import_of_a_part(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        'def f() -> None:\n    from bench.run import main\n\n\nCOMMAND = "localrun.soak:main"\n'
    )
    names = _names(module)
    bench, soak = (
        next(part for part in OPTIONAL_PARTS if part.paths[0] == top) for top in ("bench", "localrun/soak")
    )
    assert any(_reaches(name, bench) for name in names) and any(_reaches(name, soak) for name in names)
    assert not any(_reaches(name, bench) for name in ["benchmarks", "bench_marks.x", "localrun.demo"])


@pytest.fixture(scope="module")
def pruned_fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_checkout(tmp_path_factory.mktemp("pruned"))
    for part in OPTIONAL_PARTS:
        removed = subprocess.run(
            ["rm", "-r", *part.paths], cwd=root, capture_output=True, text=True, check=False
        )
        assert removed.returncode == 0, removed.stderr
    return root


def _run(fork: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` in the fork, with the fork's own function package first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fork / "function"), str(fork)])}
    return subprocess.run(
        [sys.executable, *command], cwd=fork, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS
    )


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout[-4000:] + result.stderr[-4000:]


def test_the_pruned_fork_holds_no_optional_part(pruned_fork: Path) -> None:
    assert not any((pruned_fork / path).exists() for part in OPTIONAL_PARTS for path in part.paths)
    assert (pruned_fork / "function" / "exactly_once").is_dir()


def test_make_check_passes_without_the_optional_parts(pruned_fork: Path) -> None:
    result = _run(pruned_fork, "-m", "tools.fork_check")
    assert result.returncode == 0, _output(result)


def test_every_remaining_test_module_imports_and_the_docs_tests_pass(pruned_fork: Path) -> None:
    collected = _run(pruned_fork, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert collected.returncode == 0, _output(collected)
    assert " tests collected in " in collected.stdout, _output(collected)  # not "N errors in"
    docs = _run(
        pruned_fork, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/docs", "tests/infra/test_rooms.py"
    )
    assert docs.returncode == 0, _output(docs)
    tables = _run(pruned_fork, "-m", "tools.docs_tables", "--check")
    assert tables.returncode == 0, _output(tables)


def test_the_linters_pass_on_what_remains(pruned_fork: Path) -> None:
    linted = ["function", "infra", "policy", "localrun", "ops", "tools", "tests", "__main__.py"]
    for command in (["check"], ["format", "--check"]):
        result = _run(pruned_fork, "-m", "ruff", *command, *linted)
        assert result.returncode == 0, _output(result)


def test_make_demo_passes_without_the_optional_parts(pruned_fork: Path, tmp_path: Path) -> None:
    result = _run(pruned_fork, "-m", "localrun.demo", "--runs", "5", "--output-dir", str(tmp_path))
    assert result.returncode == 0, _output(result)
    assert "PASS: 5/5 runs executed exactly once" in result.stdout, _output(result)
