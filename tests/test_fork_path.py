"""The fork path, followed literally: what README.md and docs/jobs.md tell a forker to do,
done to a copy of the repository, and then every check a fork runs.

The copy gets the first job and its two tests exactly as docs/jobs.md prints them, the
documented job entry appended after the dev stack's jobs, the README's `pulumi config set`
example applied, and the prod stack replaced by the documented one that holds only the
forker's job. Then `make check`'s checks, the forker's tests and the template tests a
forker's files could break run there. If the docs and the checks ever disagree, this fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config.paths import REPO_ROOT
from infra.config.schema import project_name
from tests.support.doc_examples import JOBS_DOC, example_source
from tests.support.mypy_cache import seed_mypy_cache
from tools.pruned_checkout import copy_checkout

# Started first (tests/conftest.py): it walks a fork's path in a copy of the repository.
pytestmark = pytest.mark.slow_module

README = REPO_ROOT / "README.md"
# The template's tests that read what a forker changes: their own stacks, the jobs folder.
# Of tests/test_fork_checks.py, the two that hold the forker's own stacks and files (the
# others check `make check` on projects they build from the template's files).
FORK_SENSITIVE_TESTS = (
    "tests/jobs",
    "tests/test_fork_checks.py::test_your_stack_passes_every_rule",
    "tests/test_fork_checks.py::test_your_job_modules_and_tests_are_lint_and_type_clean",
    "tests/infra/config/test_handlers.py",
    "tests/docs",
)
TIMEOUT_SECONDS = 600
# The quick loop's test builds copies of its own and runs make in them: what it checks (the
# Makefile's targets, the page's commands) no fork's jobs or stacks change, and the template runs it.
NOT_IN_COPIES = ("--deselect", "tests/docs/test_quick_loop.py")


def _yaml_example(name: str) -> Any:
    text = JOBS_DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- example: {re.escape(name)} -->\n```yaml\n(.*?)```", text, re.DOTALL)
    assert found, f"docs/jobs.md has no yaml example {name}"
    return yaml.safe_load(found.group(1))


def _readme_config_sets() -> list[tuple[str, str]]:
    """Every `pulumi config set --path KEY VALUE` the README shows, as (path, value)."""
    text = README.read_text(encoding="utf-8")
    return re.findall(r"pulumi config set\s+--path\s+'([^']+)'\s+'([^']+)'", text)


def _set_path(config: dict[str, Any], path: str, value: str) -> None:
    """What `pulumi config set --path` does to a stack file, for a path like jobs[0].schedule."""
    parts = [part for part in re.split(r"\.|\[(\d+)\]", path) if part]
    target: Any = config
    for part, following in zip(parts, [*parts[1:], None], strict=True):
        key: Any = int(part) if part.isdigit() else part
        if following is None:
            target[key] = value
        else:
            target = target[key]


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_checkout(tmp_path_factory.mktemp("fork"))
    seed_mypy_cache(root, tmp_path_factory)
    for name in ("jobs/my_job.py", "tests/jobs/test_my_job.py", "tests/jobs/test_my_job_served.py"):
        target = root / ("function" / Path(name) if name.startswith("jobs/") else Path(name))
        target.write_text(example_source(name), encoding="utf-8")
    namespace = project_name(root)
    dev_file = root / "Pulumi.dev.yaml"
    dev = yaml.safe_load(dev_file.read_text(encoding="utf-8"))
    jobs = dev["config"][f"{namespace}:jobs"]
    jobs.extend(_yaml_example("jobs entry"))
    sets = _readme_config_sets()
    assert sets, "the README shows no `pulumi config set --path` example"
    for path, value in sets:
        key = re.split(r"[.\[]", path, maxsplit=1)[0]
        holder = {key: dev["config"][f"{namespace}:{key}"]}
        _set_path(holder, path, value)
    dev_file.write_text(yaml.safe_dump(dev, sort_keys=False), encoding="utf-8")
    prod = yaml.safe_dump(_yaml_example("Pulumi.prod.yaml"))
    (root / "Pulumi.prod.yaml").write_text(prod, encoding="utf-8")
    return root


def _run(fork: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, *command],
        cwd=fork,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def test_the_fork_holds_what_the_docs_said(fork: Path) -> None:
    dev = yaml.safe_load((fork / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    jobs = dev[f"{project_name(fork)}:jobs"]
    assert jobs[-1]["name"] == "regional-report" and jobs[-1]["handler"] == "jobs.my_job:run"
    assert jobs[0]["schedule"] == "*/5 * * * *"
    prod = yaml.safe_load((fork / "Pulumi.prod.yaml").read_text(encoding="utf-8"))["config"]
    assert [job["name"] for job in prod[f"{project_name(fork)}:jobs"]] == ["regional-report"]


def test_make_check_passes_on_the_fork(fork: Path) -> None:
    result = _run(fork, "-m", "tools.fork_check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok    Pulumi.prod.yaml" in result.stdout and "ok    Pulumi.dev.yaml" in result.stdout


def test_the_forkers_tests_and_the_template_tests_they_could_break_pass(fork: Path) -> None:
    result = _run(fork, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FORK_SENSITIVE_TESTS, *NOT_IN_COPIES)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_forkers_job_passes_the_demo(fork: Path, tmp_path: Path) -> None:
    """The walk's last step, as docs/jobs.md gives it (`make demo ARGS="--stack dev --job
    regional-report"`): the forker's job, served by the fork's function, delivered at least once
    by the local scheduler, each run executed once."""
    result = _run(
        fork,
        "-m",
        "localrun.demo",
        "--stack",
        "dev",
        "--job",
        "regional-report",
        "--runs",
        "2",
        "--output-dir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "PASS: 2/2 runs executed exactly once and succeeded" in result.stdout
