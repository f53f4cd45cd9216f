"""The region the stack was last deployed in, read from the stack's own previous outputs.

The program sees only its configuration, not the state: a `pulumi.StackReference` to the stack
itself reads the outputs of its last update (the engine reads it in a preview too), among them
the `region` output every update records. Whatever must not be created in a new region waits
for the check (infra/component.py routes it through the pause after the APIs), so a refused
region change fails before any regional resource is touched.
"""

from __future__ import annotations

import pulumi

from infra.config.schema import SettingsError
from infra.settings.region_change import REGION_OUTPUT, check_region_unchanged
from infra.settings.stack import StackSettings


def checked_region(name: str, settings: StackSettings, *, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The stack's region, once checked against the one its last update recorded; a changed
    region fails the preview or update with the error of infra/settings/region_change.py."""
    stack = pulumi.get_stack()
    last_update = pulumi.StackReference(
        f"{name}-last-update",
        stack_name=f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}",
        opts=pulumi.ResourceOptions(parent=parent),
    )

    def check(deployed: object) -> str:
        try:
            return check_region_unchanged(deployed, settings.region, stack)
        except SettingsError as error:
            raise pulumi.RunError(str(error)) from error

    return last_update.get_output(REGION_OUTPUT).apply(check)
