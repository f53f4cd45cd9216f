"""`ops`, `make check` and the demo on a stack whose project and region come from a Pulumi ESC
environment: with the Pulumi CLI, they act on the config it resolves; without it, each says in
one line which environment could not be read and what to do, and does nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config.schema import REPO_ROOT
from infra.settings.loading import load_stack_settings, stack_names
from localrun import demo
from localrun.verdicts import EXIT_CANNOT_RUN
from ops.__main__ import PROG
from ops.__main__ import main as ops_main
from ops.context import StackContext
from ops.exit_codes import ExitCode
from tests.infra.conftest import NAMESPACE
from tests.infra.settings.conftest import (
    ENVIRONMENT,
    FROM_ENVIRONMENT,
    NIGHTLY,
    esc_stack_text,
    resolved,
    write_stack,
)
from tests.support.pulumi_cli import StandInPulumi
from tools.fork_check import check_stack

# ops and the demo read the project's own stacks (at the repository's root) through the CLI;
# the stand-in answers for one of them, whatever its file holds.
YOUR_STACKS = stack_names(REPO_ROOT)
needs_a_stack_of_your_own = pytest.mark.skipif(not YOUR_STACKS, reason="no Pulumi.<stack>.yaml at the root")
CANNOT_READ = (
    f"stack 'prod' (Pulumi.prod.yaml) imports the Pulumi ESC environment {ENVIRONMENT}, whose values"
)
INSTALL = "install the Pulumi CLI and log in (`pulumi login`), then run this again"


@pytest.fixture
def esc_stack(project: Path) -> Path:
    """The project with a stack `prod` that imports an environment for its project and region."""
    write_stack(project, "prod", esc_stack_text())
    return project


@pytest.fixture
def resolving_cli(pulumi_cli: StandInPulumi) -> StandInPulumi:
    """The CLI, answering for `prod` and for the first of your stacks as it resolves an ESC stack."""
    for stack in ("prod", *YOUR_STACKS[:1]):
        pulumi_cli.answer(stack, resolved({f"{NAMESPACE}:jobs": [NIGHTLY]}, FROM_ENVIRONMENT))
    return pulumi_cli


def test_ops_without_the_cli_says_which_environment_it_could_not_read(
    esc_stack: Path, no_pulumi_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ops_main(["status", "--stack", "prod", "--stacks-dir", str(esc_stack)]) == ExitCode.USAGE_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(f"{PROG}: error: {CANNOT_READ}") and line.endswith(INSTALL)


@needs_a_stack_of_your_own
def test_ops_acts_on_the_config_the_cli_resolves(
    resolving_cli: StandInPulumi, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = YOUR_STACKS[0]
    assert StackContext.load(stack).firestore_project == "esc-project"
    # An unknown job is refused from the config alone, naming the jobs the CLI's answer holds.
    assert ops_main(["status", "--stack", stack, "--job", "nope"]) == ExitCode.USAGE_ERROR
    assert (
        f"stack {stack!r} has no job 'nope'; its jobs are: nightly, missed-run-audit"
        in capsys.readouterr().err
    )
    assert resolving_cli.working_folders() == [REPO_ROOT, REPO_ROOT]


def test_make_check_without_the_cli_fails_the_stack_in_one_line(esc_stack: Path, no_pulumi_cli: None) -> None:
    [finding] = check_stack("prod", esc_stack)
    assert not finding.advisory
    assert str(finding) == f"error: Pulumi.prod.yaml: {CANNOT_READ} (gcp:project, gcp:region or any " + (
        f"other key) only the Pulumi CLI can read; {INSTALL}"
    )


def test_make_check_checks_the_config_the_cli_resolves(esc_stack: Path, resolving_cli: StandInPulumi) -> None:
    assert [str(finding) for finding in check_stack("prod", esc_stack) if not finding.advisory] == []
    assert len(resolving_cli.calls()) == 1


def test_the_demo_without_the_cli_refuses_before_starting_anything(
    esc_stack: Path, no_pulumi_cli: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--stack NAME` reads the stack from this project's folder instead of the repository's root.
    monkeypatch.setattr(demo, "load_settings", lambda stack: load_stack_settings(stack, stacks_dir=esc_stack))
    out = esc_stack / "out"
    assert demo.main(["--stack", "prod", "--output-dir", str(out)]) == EXIT_CANNOT_RUN
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"demo: {CANNOT_READ}") and line.endswith(INSTALL)
    assert not out.exists()


@needs_a_stack_of_your_own
def test_the_demo_reads_the_jobs_the_cli_resolves(
    resolving_cli: StandInPulumi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = YOUR_STACKS[0]
    out = tmp_path / "out"
    assert demo.main(["--stack", stack, "--job", "nope", "--output-dir", str(out)]) == EXIT_CANNOT_RUN
    assert f"no job 'nope' in stack {stack!r} (jobs: nightly)" in capsys.readouterr().err
    assert len(resolving_cli.calls()) == 1 and not out.exists()
