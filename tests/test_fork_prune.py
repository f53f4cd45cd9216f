"""A fork may delete each optional part (tools/optional_parts.py) with `git rm -r` and stay green.

Two halves. Read from the source: nothing outside a part imports it, at any depth of the code
(inside functions and under TYPE_CHECKING too), nor names one of its modules in a string (a
`python -m` line, a "module:function" path), so deleting one part alone breaks nothing another
file needs. Run on ONE copy with every part deleted at once: `make check`, every remaining test
module collected (each imports), the tests that read the docs and what a deletion changes, the
linters and `make demo`, as the fork would run them. The rest of `make test` runs on such a copy
with `make test-pruned` (tools/pruned_checkout.py), which takes as long as `make test` and so is
not part of it.

The copy is a checkout that has run, as a forker's is when they prune it: every module compiled
and the function's wheel built before `git rm -r`, which leaves that behind. So a part counts as
deleted by what git has of it, and no test reads a leftover as source. That also makes the copy
cheap where it proves nothing less: Python checks each compiled module against its source's size
and time and ignores those whose source is gone, so an import of a deleted module still fails;
the collection and the docs' tests are one pytest process, and the demo fires four runs: with its
fault rates every fault kind lands on a run of four (localrun/faults.py), so the judgement covers
each.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config.paths import REPO_ROOT
from localrun.faults import Fault, FaultRates, fault_counts, plan_faults
from localrun.simulation import SimulationOptions
from policy.scheduler_guardrails.rules.config.python_source import parse_python_file
from tests.support.mypy_cache import seed_mypy_cache
from tests.support.python_imports import named_imports
from tests.support.sources import git_checkout, python_sources
from tools.optional_parts import OPTIONAL_PARTS, OptionalPart, checkout_files, part_of, present_paths, pruned
from tools.pruned_checkout import pruned_checkout

# Started first (tests/conftest.py): it builds a pruned fork and runs its tests: minutes on one worker.
pytestmark = pytest.mark.slow_module

TIMEOUT_SECONDS = 900
# The fewest demo runs that carry every fault kind (four primary kinds, one per run, and a
# duplicate on one of them).
DEMO_RUNS = 4
# The tests run on the copy (every other one is only collected): the docs', and those that read
# what a deletion changes (infra's rooms, the handlers the docs list).
DOCS_TESTS = ("tests/docs", "tests/infra/test_rooms.py", "tests/infra/config/test_handlers.py")


def _module_name(path: str) -> str:
    """The module a repository path is imported as. The function's source is a root of its own,
    as the deployed function and the tests import it: `function/jobs/demo.py` is `jobs.demo`."""
    return path.removeprefix("function/").removesuffix(".py").replace("/", ".")


def _python_files() -> list[str]:
    return [name for name in checkout_files() if name.endswith(".py")]


@functools.cache
def _names(path: Path) -> list[str]:
    """Every module an import in `path` names, and every string that could name one. Read once
    per file for every part: the parse, not the matching, is what this half costs."""
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
    present = present_paths(part)
    if not present:
        pytest.skip(f"this checkout deleted {part.name}")
    # A part is deleted whole or kept whole: what is left of a half-deleted one may name the rest.
    assert present == list(part.paths), f"{part.name}: delete the rest too, or restore it"
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
        'HANDLER = "jobs.workflows:start_workflow_execution"\n'
    )
    names = _names(module)
    bench, soak, kinds = (
        next(part for part in OPTIONAL_PARTS if part.paths[0] == top)
        for top in ("bench", "localrun/soak", "policy/scheduler_guardrails/rules/targets/workflow.py")
    )
    assert all(any(_reaches(name, part) for name in names) for part in (bench, soak, kinds))
    assert not any(_reaches(name, bench) for name in ["benchmarks", "bench_marks.x", "localrun.demo"])


def _benchmark() -> OptionalPart:
    return next(part for part in OPTIONAL_PARTS if part.paths[0] == "bench")


@pytest.fixture
def used_checkout(tmp_path: Path) -> Path:
    """A checkout with the benchmark and a job, that has run (its modules compiled, the
    function's package built), then had the benchmark deleted as the README says."""
    root = git_checkout(
        tmp_path,
        {
            "bench/run.py": "def main() -> None: ...\n",
            "tests/bench/test_run.py": "from bench.run import main\n",
            "function/jobs/report.py": 'REPORT_ENV = "REPORT_BUCKET"\n',
        },
    )
    for name in ("bench/run.py", "function/jobs/report.py"):
        subprocess.run([sys.executable, "-m", "py_compile", name], cwd=root, check=True)
    (root / "function" / "build" / "lib" / "jobs").mkdir(parents=True)
    (root / "function" / "build" / "lib" / "jobs" / "stale.py").write_text('STALE_ENV = "GONE"\n')
    subprocess.run(["git", "rm", "-r", "-q", *_benchmark().paths], cwd=root, check=True)
    return root


def test_a_part_deleted_with_git_rm_is_deleted_though_its_compiled_modules_stay(used_checkout: Path) -> None:
    assert (used_checkout / "bench" / "__pycache__").is_dir()
    assert present_paths(_benchmark(), used_checkout) == []
    assert pruned("bench/run.py", root=used_checkout)
    # A file git would add is the fork's own, in a part it keeps after all.
    (used_checkout / "bench" / "mine.py").write_text("")
    assert present_paths(_benchmark(), used_checkout) == ["bench"]
    assert not pruned("bench/run.py", root=used_checkout)


def test_the_source_read_is_what_git_has_not_a_builds_output(used_checkout: Path) -> None:
    function = used_checkout / "function"
    assert python_sources(function) == [function / "jobs" / "report.py"]
    assert python_sources(used_checkout / "bench") == []
    (function / "jobs" / "new.py").write_text("")
    assert python_sources(function) == [function / "jobs" / "new.py", function / "jobs" / "report.py"]


def test_the_makefile_neither_runs_nor_lints_a_part_deleted_with_git_rm(used_checkout: Path) -> None:
    # The Makefile's own virtualenv is no part of this checkout: nothing here may need it.
    make = ["make", "--no-print-directory", "-f", str(REPO_ROOT / "Makefile"), "-o", "venv/.installed"]
    ran = subprocess.run([*make, "bench"], cwd=used_checkout, capture_output=True, text=True, check=False)
    assert ran.returncode == 0 and "bench is not in this checkout" in ran.stdout, ran.stdout + ran.stderr
    typecheck = subprocess.run(
        [*make, "--dry-run", "typecheck"], cwd=used_checkout, capture_output=True, text=True, check=True
    )
    assert "mypy" in typecheck.stdout and "bench" not in typecheck.stdout.split(), typecheck.stdout


@pytest.fixture(scope="module")
def pruned_fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The copy `make test-pruned` runs everything on: used, then every part this checkout still
    # has deleted with `git rm -r` (a fork that deleted some already is that far), the docs'
    # tables regenerated and the deletion committed. Its mypy starts from the test run's warm
    # cache (tests/support/mypy_cache.py), which gives the verdicts of a first run.
    fork = pruned_checkout(tmp_path_factory.mktemp("pruned"))
    seed_mypy_cache(fork, tmp_path_factory)
    return fork


def _run(fork: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` in the fork, with the fork's own function package first on the path. Each
    process leaves its compiled modules for the next, as `make` lets them (see the Makefile)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fork / "function"), str(fork)])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run(
        [sys.executable, *command], cwd=fork, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS
    )


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout[-4000:] + result.stderr[-4000:]


def test_the_pruned_fork_holds_no_optional_part_but_what_running_left(pruned_fork: Path) -> None:
    # A repository of its own, whose tests list its files and not this checkout's.
    files = checkout_files(pruned_fork)
    assert "function/main.py" in files
    assert not [name for name in files if part_of(name)]
    # What `git rm -r` leaves of a checkout that ran: the parts' compiled modules, and the build.
    assert any(
        (pruned_fork / path / "__pycache__").is_dir() for part in OPTIONAL_PARTS for path in part.paths
    )
    assert list((pruned_fork / "function" / "build" / "lib").rglob("*.py"))
    status = ["git", "status", "--porcelain"]
    assert subprocess.run(status, cwd=pruned_fork, capture_output=True, text=True, check=True).stdout == ""


def test_make_check_passes_without_the_optional_parts(pruned_fork: Path) -> None:
    result = _run(pruned_fork, "-m", "tools.fork_check")
    assert result.returncode == 0, _output(result)


def _not_docs_tests(fork: Path) -> list[str]:
    """`--deselect` prefixes for every test outside DOCS_TESTS: collected, so imported, not run."""
    prefixes: list[str] = []
    pending = [fork / "tests"]
    while pending:
        for entry in sorted(pending.pop().iterdir()):
            relative = entry.relative_to(fork).as_posix()
            if relative in DOCS_TESTS:
                continue
            if any(docs.startswith(f"{relative}/") for docs in DOCS_TESTS):
                pending.append(entry)
            elif entry.is_dir() or entry.name.startswith("test_"):
                prefixes += ["--deselect", relative]
    return prefixes


def test_every_remaining_test_module_imports_and_the_docs_tests_pass(pruned_fork: Path) -> None:
    # The copy's docs' tables were regenerated, as a fork does after the deletion (`make docs`):
    # a deleted target kind's rows leave docs/stack.md's jobs table with it. One process: a
    # module that fails to import is a collection error, which fails the run before any test of
    # it; the docs' tests then run, the others are deselected.
    # The quick loop's test builds copies of its own: a deletion changes nothing it checks.
    quick_loop = ("--deselect", "tests/docs/test_quick_loop.py")
    run = _run(
        pruned_fork,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *_not_docs_tests(pruned_fork),
        *quick_loop,
    )
    assert run.returncode == 0, _output(run)
    assert " deselected" in run.stdout and " passed" in run.stdout, _output(run)
    tables = _run(pruned_fork, "-m", "tools.docs_tables", "--check")
    assert tables.returncode == 0, _output(tables)


def test_the_linters_pass_on_what_remains(pruned_fork: Path) -> None:
    linted = ["function", "infra", "policy", "localrun", "ops", "tools", "tests", "__main__.py"]
    for command in (["check"], ["format", "--check"]):
        result = _run(pruned_fork, "-m", "ruff", *command, *linted)
        assert result.returncode == 0, _output(result)


def test_the_demos_runs_carry_every_fault_kind() -> None:
    counts = fault_counts(plan_faults(DEMO_RUNS, FaultRates(), SimulationOptions().seed))
    assert all(counts[fault.value] > 0 for fault in Fault), counts


def test_make_demo_passes_without_the_optional_parts(pruned_fork: Path, tmp_path: Path) -> None:
    result = _run(pruned_fork, "-m", "localrun.demo", "--runs", str(DEMO_RUNS), "--output-dir", str(tmp_path))
    assert result.returncode == 0, _output(result)
    assert f"PASS: {DEMO_RUNS}/{DEMO_RUNS} runs executed exactly once" in result.stdout, _output(result)
