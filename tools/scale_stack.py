"""A stack of N ordinary jobs, for measuring and testing how the stack's costs grow with its
jobs (bench/scale.py measures it; tests/infra/resources/test_scale.py holds the limits)."""

from __future__ import annotations

from typing import Any

from infra.settings.loading import settings_from_config
from infra.settings.stack import StackSettings

# An ordinary job: hourly, with the default retries and a handler of its own.
SCALE_HANDLER = "jobs.noop:do_nothing"


def scale_values(jobs: int) -> dict[str, Any]:
    """A stack config of `jobs` hourly jobs, each naming its handler."""
    return {
        "functionTimeoutSeconds": 60,
        "jobs": [
            {"name": f"job-{index:04d}", "schedule": "0 * * * *", "handler": SCALE_HANDLER}
            for index in range(jobs)
        ],
    }


def scale_settings(jobs: int) -> StackSettings:
    """The settings of `scale_values(jobs)`, through every check the stack's config gets."""
    return settings_from_config(
        scale_values(jobs), project="acme-scale", region="europe-west1", stack="prod", namespace="eos"
    )
