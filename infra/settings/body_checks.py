"""Each job's body against what the function accepts, phrased with the config key that sets it.

What the function accepts, and why a body it refuses can never run, is
policy/scheduler_guardrails/rules/config/delivery_body.py's; the policy pack asks the same
question of the bytes a Scheduler job declares, so `pulumi up`, `make check` and the pack agree.
"""

from __future__ import annotations

from pathlib import Path

from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.delivery_body import body_problems, max_body_bytes
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.targets.registry import kind_of


def body_errors(settings: StackSettings, function_dir: Path) -> list[str]:
    """Every job whose body the function deployed from `function_dir` would refuse, by the key
    to edit, with the body's size and the limit or the numbers JSON cannot hold."""
    try:
        limit = max_body_bytes(function_dir)
    except SettingsError as error:
        return [str(error)]
    errors: list[str] = []
    for index, job in enumerate(settings.jobs):
        key = settings.config_key(_body_key(job, index))
        try:
            body = settings.scheduled_body(job)
        except (TypeError, ValueError) as error:
            errors.append(f"{key}: job {job.name!r}: the body cannot be written as JSON ({error})")
            continue
        if body is not None:
            errors.extend(f"{key}: job {job.name!r}: {problem}" for problem in body_problems(body, limit))
    return errors


def _body_key(job: JobSettings, index: int) -> str:
    """Where the job's body comes from: its target's setting (a workflow's `argument`), else `body`."""
    if job.target is not None:
        return f"jobs[{index}].{kind_of(job.target).key}"
    return f"jobs[{index}].body"
