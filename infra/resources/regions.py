"""The Pulumi names of what a stack deploys once per region.

The stack's first region keeps the names its resources always had, so a one-region stack, and
the first region of a two-region one, keep every URN. What the second region deploys carries
the region in its name: `<name>-<region>-function`. The names in Google Cloud stay the same in
both regions (a function, a Scheduler job and a repository are named per location): the
function then reports the same service as the target of the runs it records, and Cloud
Scheduler sends the same job name, so both regions' deliveries of a run are the same run.
"""

from __future__ import annotations

from infra.settings.stack import StackSettings


def regional_prefix(name: str, settings: StackSettings, region: str) -> str:
    """The prefix of the Pulumi names of what `region` deploys: `name` in the first region."""
    if region not in settings.regions:
        raise ValueError(f"region {region!r} is not one of the stack's ({', '.join(settings.regions)})")
    return name if region == settings.region else f"{name}-{region}"
