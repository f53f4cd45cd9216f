"""The template's own stacks: fixtures the tests read instead of the forker's stack files.

`Pulumi.dev.yaml` and `Pulumi.prod.yaml` at the repository's root are the forker's to rewrite
or delete; the tests that need a known stack (its jobs, its names, its timing) read these
copies, which only the template changes. The tests whose purpose is to check the forker's own
stacks read the root's (tests/test_fork_checks.py).
"""

from __future__ import annotations

from infra.config.schema import REPO_ROOT
from infra.settings.loading import load_stack_settings
from infra.settings.stack import StackSettings
from tools.mocked_program import MockedResource, run_mocked_stack

FIXTURE_STACKS = REPO_ROOT / "tests" / "fixtures" / "stacks"


def fixture_stack(stack: str = "dev") -> StackSettings:
    """The template's fixture stack `stack` ("dev" or "prod"), validated as any stack is."""
    return load_stack_settings(stack, stacks_dir=FIXTURE_STACKS)


def dev_stack_resources() -> list[MockedResource]:
    """The fixture dev stack as `pulumi up -s dev` would declare it."""
    return run_mocked_stack(fixture_stack("dev"))
