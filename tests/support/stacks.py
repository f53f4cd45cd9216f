"""The template's own stacks: fixtures the tests read instead of the forker's stack files.

`Pulumi.dev.yaml` and `Pulumi.prod.yaml` at the repository's root are the forker's to rewrite
or delete; the tests that need a known stack (its jobs, its names, its timing) read these
copies, which only the template changes. The tests whose purpose is to check the forker's own
stacks read the root's (tests/test_fork_checks.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from infra.config.schema import REPO_ROOT
from infra.settings.jobs import JobSettings
from infra.settings.loading import load_stack_settings
from infra.settings.samples import DEMO_JOB
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from tools.mocked_program import MockedResource, run_mocked_stack

FIXTURE_STACKS = REPO_ROOT / "tests" / "fixtures" / "stacks"


def fixture_stack(stack: str = "dev") -> StackSettings:
    """The template's fixture stack `stack` ("dev" or "prod"), validated as any stack is."""
    return load_stack_settings(stack, stacks_dir=FIXTURE_STACKS)


def dev_stack_resources() -> list[MockedResource]:
    """The fixture dev stack as `pulumi up -s dev` would declare it."""
    return run_mocked_stack(fixture_stack("dev"))


def demo_job(settings: StackSettings) -> JobSettings:
    """The sample demo job of a stack with `samples: true`, as the fixture dev stack has."""
    return settings.job_named(DEMO_JOB)


def with_job(settings: StackSettings, name: str, /, **changes: Any) -> StackSettings:
    """`settings` with its job `name` changed by `changes` (a new `name` among them), in the
    same place among the jobs."""
    settings.job_named(name)  # refuses a name the stack does not have
    jobs = tuple(dataclasses.replace(job, **changes) if job.name == name else job for job in settings.jobs)
    return dataclasses.replace(settings, jobs=jobs)


def kind_sample_minutes(settings: StackSettings) -> dict[str, int]:
    """The sample job of each target kind present, which `settings` runs (`samples: true`), and
    the minute past the hour it fires at: the kinds' samples are hourly."""
    samples = [kind.sample_job for kind in TARGET_KINDS if kind.sample_job is not None]
    assert all(sample.schedule.split()[1:] == ["*"] * 4 for sample in samples), samples
    assert {sample.name for sample in samples} == {
        job.name for job in settings.jobs if job.target is not None
    }
    return {sample.name: int(sample.schedule.split()[0]) for sample in samples}
