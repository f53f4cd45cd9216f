"""Your own files, held to every rule: each `Pulumi.<stack>.yaml` at the root, your job modules
and your tests. These are the checks `make check` runs (tools/fork_check.py), so the two never
disagree; they pass for any valid stack, whatever its jobs are called.

The template's own behaviour is tested on fixtures of its own (tests/fixtures/stacks/); only
this module reads your stacks.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
import yaml

from exactly_once.delivery.handler import MAX_BODY_BYTES
from infra.config.paths import REPO_ROOT
from infra.settings.loading import load_stack_settings, stack_names
from policy.scheduler_guardrails.offline import Violation, pack_violations
from policy.scheduler_guardrails.timing.invariants import is_unjudged_notice
from tests.support.mypy_cache import seed_mypy_cache
from tests.support.stacks import FIXTURE_STACKS
from tools import fork_check
from tools.fork_check import check_stack, lint
from tools.mocked_program import as_policy_value, run_mocked_stack

# Started first (tests/conftest.py): it builds projects of its own and runs make check on them.
pytestmark = pytest.mark.slow_module

YOUR_STACKS = stack_names(REPO_ROOT)
NOOP = "jobs.noop:do_nothing"


@pytest.mark.parametrize("stack", YOUR_STACKS)
def test_your_stack_passes_every_rule(stack: str) -> None:
    errors = [str(finding) for finding in check_stack(stack) if not finding.advisory]
    assert errors == []


def test_your_job_modules_and_tests_are_lint_and_type_clean(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mypy from a copy of the test run's warm cache (tests/support/mypy_cache.py): a first run's
    # verdict, without writing to the checkout's .mypy_cache/ while `make typecheck` does.
    monkeypatch.setenv("MYPY_CACHE_DIR", str(seed_mypy_cache(tmp_path, tmp_path_factory)))
    assert [str(finding) for finding in lint()] == []


def _new_project(root: Path) -> Path:
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(REPO_ROOT / "function", root / "function", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project holding the template's Pulumi.yaml and function/, and no stack yet."""
    return _new_project(tmp_path)


@pytest.fixture(scope="module")
def type_checked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project as `project` makes it, with the template's pyproject.toml (ruff's and mypy's
    rules), linted once, from the test run's warm mypy cache (tests/support/mypy_cache.py). The
    cache is copied along with the project (timestamps kept) for each test that lints it."""
    root = _new_project(tmp_path_factory.mktemp("type-checked"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    seed_mypy_cache(root, tmp_path_factory)
    assert [str(finding) for finding in lint(root)] == []
    return root


@pytest.fixture
def linted_project(type_checked: Path, tmp_path: Path) -> Path:
    """`project` with the template's pyproject.toml, for a test that runs the linters on it."""
    return Path(shutil.copytree(type_checked, tmp_path / "project"))


def _stack(project: Path, name: str, jobs: list[dict[str, object]], **config: object) -> None:
    values: dict[str, object] = {"gcp:project": "acme-prod", "gcp:region": "europe-west1"}
    values["exactly-once-scheduler:jobs"] = jobs
    values.update({f"exactly-once-scheduler:{key}": value for key, value in config.items()})
    (project / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": values}), encoding="utf-8")


def test_a_broken_stack_fails_naming_its_key(project: Path) -> None:
    _stack(project, "broken", [{"name": "nightly", "schedule": "0 3 * * *", "handler": "jobs.nope:run"}])
    [finding] = check_stack("broken", project)
    assert not finding.advisory and "jobs[0].handler: 'jobs.nope:run': no module" in finding.message


def test_a_job_without_handler_fails_when_the_stack_sets_no_jobhandler(project: Path) -> None:
    """The template's prod stack, which sets no jobHandler, plus a job copied without its
    handler: nothing would say what that job runs, so the check refuses it, naming the job and
    the two ways out."""
    prod = yaml.safe_load((FIXTURE_STACKS / "Pulumi.prod.yaml").read_text(encoding="utf-8"))["config"]
    assert "exactly-once-scheduler:jobHandler" not in prod
    prod["exactly-once-scheduler:jobs"].append({"name": "weekly", "schedule": "0 4 * * 1"})
    (project / "Pulumi.prod.yaml").write_text(yaml.safe_dump({"config": prod}), encoding="utf-8")
    [finding] = check_stack("prod", project)
    assert not finding.advisory
    assert (
        "jobs[1].handler: job 'weekly' names no handler and the stack sets no jobHandler" in finding.message
    )
    assert "exactly-once-scheduler:jobHandler: jobs.my_job:run" in finding.message


def test_each_job_that_falls_back_to_the_stacks_jobhandler_is_told_which_handler_it_runs(
    project: Path,
) -> None:
    """A stack-wide fallback runs every job that names no handler, whatever that fallback does:
    the check says, for each such job, which handler that is. An advisory: the stack is valid."""
    _stack(
        project,
        "fallback",
        [
            {"name": "copied", "schedule": "0 3 * * *"},
            {"name": "own", "schedule": "0 4 * * *", "handler": "jobs.demo:run_demo_job"},
        ],
        jobHandler=NOOP,
    )
    findings = check_stack("fallback", project)
    assert all(finding.advisory for finding in findings)
    told = [str(finding) for finding in findings if "jobHandler" in finding.message]
    assert told == [
        "advisory: Pulumi.fallback.yaml: exactly-once-scheduler:jobs[0].handler: job 'copied' sets no "
        f"handler, so it runs the stack's exactly-once-scheduler:jobHandler, {NOOP!r}; set its own "
        "handler to say what it runs"
    ]


def test_the_rules_a_first_preview_leaves_to_the_update_are_not_said_to_be_unjudged(project: Path) -> None:
    """The pack says which timing rules a first preview cannot judge without the job table; the
    check runs the pack on the update too, which judges them, so it does not repeat that."""
    _stack(
        project,
        "nightly",
        [{"name": "nightly", "schedule": "0 3 * * *", "handler": "jobs.demo:run_demo_job"}],
    )
    resources = [
        (r.type, r.name, as_policy_value(r.inputs), as_policy_value(r.outputs))
        for r in run_mocked_stack(load_stack_settings("nightly", project), project / "function", preview=True)
    ]
    assert any(is_unjudged_notice(violation.message) for violation in pack_violations(resources))
    assert [str(f) for f in check_stack("nightly", project) if is_unjudged_notice(f.message)] == []


def test_a_body_the_function_would_refuse_fails_the_check(project: Path) -> None:
    """A 70 KB string field, and a `.nan`: every delivery would be refused, so the check is."""
    _stack(
        project,
        "bodies",
        [
            {"name": "bulky", "schedule": "0 3 * * *", "handler": NOOP, "body": {"blob": "x" * 70_000}},
            {"name": "nan", "schedule": "0 4 * * *", "handler": NOOP, "body": {"ratio": math.nan}},
        ],
    )
    [finding] = check_stack("bodies", project)
    assert not finding.advisory and "invalid config for stack 'bodies'" in finding.message
    assert (
        "jobs[0].body: job 'bulky': the body Cloud Scheduler sends is 70,011 bytes, more than the "
        f"{MAX_BODY_BYTES:,} bytes the function accepts"
    ) in finding.message
    assert "jobs[1].body: job 'nan': body.ratio is .nan (NaN)" in finding.message


def test_an_advisory_is_printed_and_fails_nothing(project: Path) -> None:
    """A five-minute job with the default retries: they outlast its next run, which Cloud
    Scheduler says by dropping them; the check says so, and passes."""
    _stack(project, "every5", [{"name": "often", "schedule": "*/5 * * * *", "handler": NOOP}])
    findings = check_stack("every5", project)
    assert findings and all(finding.advisory for finding in findings)


def test_a_run_in_an_hour_the_zone_skips_or_repeats_is_an_advisory(project: Path) -> None:
    """A nightly job at 01:30 in London: the clocks skip that hour in March and repeat it in
    October. The check names the keys and the dates of the year from the day it is given, and
    passes."""
    _stack(
        project,
        "london",
        [{"name": "nightly", "schedule": "30 1 * * *", "timeZone": "Europe/London", "handler": NOOP}],
    )
    findings = check_stack("london", project, today=date(2027, 1, 1))
    [clock] = [finding for finding in findings if "skips or repeats" in finding.message]
    assert clock.advisory and str(clock).startswith(
        "advisory: Pulumi.london.yaml: exactly-once-scheduler:jobs[0].timeZone, "
        "exactly-once-scheduler:jobs[0].schedule: job 'nightly': "
    )
    assert "on 2027-03-28 the clocks skip 01:00-02:00" in clock.message
    assert "on 2027-10-31 the clocks repeat 01:00-02:00" in clock.message
    assert "set the time zone to Etc/UTC" in clock.message
    assert all(finding.advisory for finding in findings)


def test_a_mandatory_policy_fails_the_check_and_an_advisory_one_does_not(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stack(project, "nightly", [{"name": "nightly", "schedule": "0 3 * * *", "handler": NOOP}])
    reported = [
        Violation("no-public-principals", "eos-function", "allUsers may invoke", advisory=False),
        Violation("function-ingress-restricted", "eos-function", "ingress is open", advisory=True),
    ]
    monkeypatch.setattr(fork_check, "pack_violations", lambda resources: reported)
    findings = {finding.message: finding.advisory for finding in check_stack("nightly", project)}
    assert findings == {str(reported[0]): False, str(reported[1]): True}


def test_make_check_exits_with_its_verdict(linted_project: Path) -> None:
    project = linted_project
    _stack(project, "broken", [{"name": "nightly", "schedule": "0 3 * * *", "handler": "jobs.nope:run"}])
    command = [sys.executable, "-m", "tools.fork_check", "--root", str(project)]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL  Pulumi.broken.yaml" in result.stdout


# A job as a forker might first write it: no blank line after the docstring, and
# datetime.timezone.utc where the project's ruff rules want datetime.UTC.
UNFORMATTED_JOB = '''"""jobs/late.py: when the run was due."""
import datetime

from exactly_once import RunContext


def run(context: RunContext) -> dict[str, str]:
    return {"due": context.schedule_time.astimezone(datetime.timezone.utc).isoformat()}
'''


def test_a_lint_failure_names_make_format_which_fixes_it(linted_project: Path) -> None:
    project = linted_project
    (project / "function" / "jobs" / "late.py").write_text(UNFORMATTED_JOB, encoding="utf-8")
    messages = [finding.message for finding in lint(project)]
    assert [message.split(" failed:")[0] for message in messages] == ["ruff check", "ruff format"]
    assert all("`make format` fixes what ruff can fix by itself" in message for message in messages)

    command = [sys.executable, "-m", "tools.fork_check", "--format", "--root", str(project)]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "datetime.UTC" in (project / "function" / "jobs" / "late.py").read_text(encoding="utf-8")
    assert [str(finding) for finding in lint(project)] == []
