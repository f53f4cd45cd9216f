"""The code on the pages a forker copies from is code. Each Python block of the README and
docs/jobs.md is an example a test runs as written (marked `<!-- example: NAME -->` above it)
or says in its first line that it is a sketch; the README's job passes what `make test`
applies to a fork's job module: the handler check, ruff and mypy --strict."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config.schema import FUNCTION_DIR, REPO_ROOT
from policy.scheduler_guardrails.rules.config.handlers import handler_problem
from policy.scheduler_guardrails.rules.config.python_source import parse_python
from tests.package import test_installed_package
from tests.support import doc_examples
from tests.support.mypy_cache import seed_mypy_cache

README = REPO_ROOT / "README.md"
JOBS_DOC = REPO_ROOT / "docs" / "jobs.md"
README_JOB = "README job"
SKETCH = "# A sketch"
# The examples each page holds, and the tests that run them.
EXAMPLES = {
    README: {README_JOB},  # this module
    JOBS_DOC: {
        doc_examples.JOB_MODULE,
        doc_examples.UNIT_TEST,
        doc_examples.SERVED_TEST,
        doc_examples.WATERMARK_JOB,
        doc_examples.JOB_DAY,
        test_installed_package.EXAMPLE,
    },
}
_BLOCK = re.compile(r"(?:<!-- example: (?P<name>[^>]+?) -->\n)?```python\n(?P<code>.*?)```", re.DOTALL)
BIN = Path(sys.executable).parent
TOOL_TIMEOUT_SECONDS = 600


def python_blocks(page: Path) -> list[tuple[str | None, str]]:
    """(example name or None, code) of every ```python block of `page`."""
    return [(found["name"], found["code"]) for found in _BLOCK.finditer(page.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", list(EXAMPLES), ids=lambda page: page.name)
def test_every_python_block_is_an_example_a_test_runs_or_a_sketch(page: Path) -> None:
    blocks = python_blocks(page)
    for _, code in blocks:
        parse_python(code)  # a sketch too is Python
    unmarked = [code for name, code in blocks if name is None and not code.startswith(SKETCH)]
    assert unmarked == [], f"{page.name}: mark these as examples a test runs, or as sketches"
    assert {name for name, _ in blocks if name is not None} == EXAMPLES[page]


def test_the_readme_job_is_a_handler_that_passes_lint_and_typecheck(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Written where the README says (function/jobs/), in a fork with the repository's settings;
    mypy from the test run's warm cache (tests/support/mypy_cache.py)."""
    if not (BIN / "ruff").exists() or not (BIN / "mypy").exists():
        pytest.skip("ruff and mypy are installed in venv/, not in the runtime's virtualenv")
    code = dict(python_blocks(README))[README_JOB]
    assert "handler: jobs.my_job:run" in code
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    seed_mypy_cache(tmp_path, tmp_path_factory)
    function = tmp_path / "function"
    (function / "jobs").mkdir(parents=True)
    (function / "exactly_once").symlink_to(FUNCTION_DIR / "exactly_once")
    (function / "jobs" / "my_job.py").write_text(code)
    assert handler_problem("jobs.my_job:run", function) is None
    module = "function/jobs/my_job.py"
    for command in (
        [str(BIN / "ruff"), "check", module],
        [str(BIN / "ruff"), "format", "--check", module],
        [str(BIN / "mypy"), "--cache-dir", str(tmp_path / ".mypy_cache"), module],
    ):
        result = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=TOOL_TIMEOUT_SECONDS, check=False
        )
        assert result.returncode == 0, f"{command[0]}: {result.stdout}{result.stderr}"
