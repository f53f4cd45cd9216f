"""What the stack's last update recorded, read from the stack's own previous outputs, and the
check that the settings a deployed stack keeps (its region, its run ledger's database and
collection: infra/settings/kept_settings.py) did not change.

The program sees only its configuration, not the state: a `pulumi.StackReference` to the stack
itself reads the outputs of its last update (the engine reads it in a preview too), among them
the `region`, `databaseName` and `runsCollection` outputs every update records. Whatever must
not be created in a new region or on a new ledger waits for the check (infra/component.py
routes it through the pause after the APIs), so a refused change fails before any regional
resource, the database or its field settings is touched.
"""

from __future__ import annotations

import pulumi

from infra.settings.kept_settings import (
    DATABASE_OUTPUT,
    REGION_OUTPUT,
    RUNS_COLLECTION_OUTPUT,
    check_unchanged,
    ledger_moved_from,
)
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.problems import SettingsError


def checked_region(name: str, settings: StackSettings, *, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The stack's region, once it and the run ledger's place are checked against what the last
    update recorded; a change fails the preview or update with the error of
    infra/settings/kept_settings.py. Its value is the region alone, so the pause it triggers is
    not replaced by the ledger's checks."""
    stack = pulumi.get_stack()
    last_update = pulumi.StackReference(
        f"{name}-last-update",
        stack_name=f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}",
        opts=pulumi.ResourceOptions(parent=parent),
    )
    configured = {
        REGION_OUTPUT: settings.region,
        DATABASE_OUTPUT: settings.database_name,
        RUNS_COLLECTION_OUTPUT: settings.runs_collection,
    }

    def check(recorded: list[object]) -> str:
        # One apply over the three recorded values, so that a refusal is one failed output
        # (whose error every resource waiting on the region reports), not one per value.
        try:
            for output_name, deployed in zip(configured, recorded, strict=True):
                moved_from = ledger_moved_from(settings.ledger_moved_from, output_name)
                check_unchanged(output_name, deployed, configured[output_name], stack, moved_from=moved_from)
        except SettingsError as error:
            raise pulumi.RunError(str(error)) from error
        return settings.region

    recorded = pulumi.Output.all(*(last_update.get_output(output_name) for output_name in configured))
    return recorded.apply(check)
