"""`make check`: every rule `make test` applies to your own files, in well under a minute.

Your files are your stacks (each `Pulumi.<stack>.yaml` at the repository's root), your job
modules (`function/jobs/`) and your tests (`tests/jobs/`). For each stack: its config is
validated and its timing rules applied, the way `pulumi up` does before touching anything;
every handler it names is checked against `function/`; the program runs under Pulumi's mocks,
as a first preview and as an update, and every policy of the pack judges what it declares.
Then ruff and mypy read your modules and tests. `make test` runs these same functions
(tests/test_fork_checks.py), so the two never disagree.

A mandatory policy, a config error, a timing rule or a lint finding fails the check; an
advisory (a timing advisory, an advisory policy) is printed and does not, here, in `make test`,
in CI or in the policy pack.

Exit status: 0 nothing failed (advisories may have been printed); 1 something failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from infra.config.paths import REPO_ROOT
from infra.settings.fallback_handlers import fallback_advisories
from infra.settings.loading import load_stack_settings, stack_names
from infra.settings.stack import StackSettings
from infra.settings.timing_checks import timing_advisories
from policy.scheduler_guardrails.offline import pack_violations
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.timing.invariants import is_unjudged_notice
from tools.mocked_program import as_policy_value, run_mocked_stack

# What of the repository is yours to lint (besides your stacks, which are checked above).
YOUR_CODE = ("function/jobs", "tests/jobs")


@dataclass(frozen=True)
class Finding:
    where: str  # the file (and key or resource) it is about
    message: str
    advisory: bool = False

    def __str__(self) -> str:
        return f"{'advisory' if self.advisory else 'error'}: {self.where}: {self.message}"


def check_stack(stack: str, root: Path = REPO_ROOT, today: date | None = None) -> list[Finding]:
    """Everything `make test` holds a stack to: config, timing, handlers, the policy pack; and,
    as advisories, which jobs run the stack's jobHandler. Clock changes are looked for in the
    year from `today` (by default, today)."""
    where = f"Pulumi.{stack}.yaml"
    try:
        settings = load_stack_settings(stack, root)
    except SettingsError as error:
        return [Finding(where, str(error))]
    advisories = [*fallback_advisories(settings), *timing_advisories(settings, today)]
    findings = [Finding(where, advisory, advisory=True) for advisory in advisories]
    findings += _policy_findings(where, settings, root)
    return findings


def _policy_findings(where: str, settings: StackSettings, root: Path) -> list[Finding]:
    """The pack on what the program declares, as a first preview sees it and as an update."""
    found: dict[str, Finding] = {}
    for preview in (True, False):
        resources = run_mocked_stack(settings, root / "function", preview=preview)
        # As the engine sends them: a first preview's computed values unknown.
        declared = [
            (r.type, r.name, as_policy_value(r.inputs), as_policy_value(r.outputs)) for r in resources
        ]
        for violation in pack_violations(declared):
            if preview and is_unjudged_notice(violation.message):
                continue  # the rules a first preview cannot judge are judged by the update pass
            found.setdefault(str(violation), Finding(where, str(violation), advisory=violation.advisory))
    return list(found.values())


# What ruff finds it can often repair itself: a lint failure says so.
FORMAT_HINT = "`make format` fixes what ruff can fix by itself (run it, then `make check` again)"


def _your_paths(root: Path) -> list[str]:
    return [path for path in YOUR_CODE if (root / path).exists()]


def lint(root: Path = REPO_ROOT) -> list[Finding]:
    """ruff (lint and format) and mypy --strict on your job modules and tests."""
    paths = _your_paths(root)
    if not paths:
        return []
    commands = {
        "ruff check": [sys.executable, "-m", "ruff", "check", "--quiet", *paths],
        "ruff format": [sys.executable, "-m", "ruff", "format", "--check", "--quiet", *paths],
        "mypy": [sys.executable, "-m", "mypy", *paths],
    }
    findings = []
    for name, command in commands.items():
        result = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            hint = f"\n{FORMAT_HINT}" if name.startswith("ruff") else ""
            findings.append(Finding(" ".join(paths), f"{name} failed:\n{output}{hint}"))
    return findings


def format_your_code(root: Path = REPO_ROOT) -> int:
    """`make format`: ruff's fixes, then its formatter, on the files `lint` reads; what is left
    is printed, for a human to fix. The exit status is ruff's: 0 nothing is left."""
    paths = _your_paths(root)
    if not paths:
        return 0
    fixed = subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", *paths], cwd=root, check=False)
    formatted = subprocess.run([sys.executable, "-m", "ruff", "format", *paths], cwd=root, check=False)
    return fixed.returncode or formatted.returncode


def check_all(root: Path = REPO_ROOT) -> Iterator[tuple[str, list[Finding]]]:
    """(what was checked, its findings), stack by stack, then the lint of your code."""
    for stack in stack_names(root):
        yield f"Pulumi.{stack}.yaml", check_stack(stack, root)
    yield "your code (" + ", ".join(YOUR_CODE) + ")", lint(root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make check", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the project to check")
    parser.add_argument(
        "--format", action="store_true", help="fix and format your code with ruff instead (`make format`)"
    )
    args = parser.parse_args(argv)
    if args.format:
        return format_your_code(args.root)
    started = time.monotonic()
    failed = False
    for checked, findings in check_all(args.root):
        errors = [finding for finding in findings if not finding.advisory]
        failed = failed or bool(errors)
        print(f"{'FAIL' if errors else 'ok  '}  {checked}")
        for finding in findings:
            print(f"      {finding}")
    print(f"{'FAILED' if failed else 'passed'} in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
