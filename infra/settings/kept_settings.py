"""The settings a deployed stack keeps: its region and its run ledger's place. Another value is
refused before anything is touched, naming the key, both values and the way to move.

Region: a stack's Firestore database, image repository and sample dataset keep their ids
whatever the region (policy/scheduler_guardrails/rules/config/names.py), and a location is
fixed at creation: moving one means deleting it and creating it again under the same id, which
Google Cloud refuses for a while after the delete (a Firestore id stays reserved), and which
would leave the run ledger, and with it the record of which runs already ran, behind. Moving
a stack is deploying a new one (docs/deploy.md, "Changing the region").

Ledger (`databaseName`, `runsCollection`): another value replaces the database resource (the
old one is abandoned with deletion protection) or points the function at another collection,
and either way the function starts on an empty ledger: a retry of a run that already completed
runs it again, a run in flight is taken over by nobody, and the missed-run audit loses its
horizon. Moving the ledger is deploying a new stack, or copying the records still within
retention first (docs/deploy.md, "Changing the ledger").

Each is recorded as a stack output on every update (infra/plan/outputs.py) and compared with
the configuration by the next one (infra/resources/last_update.py): one check, below, for
all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from policy.scheduler_guardrails.rules.config.problems import SettingsError

# The stack outputs that record, on every update, what the next update must not change.
REGION_OUTPUT = "region"
DATABASE_OUTPUT = "databaseName"
RUNS_COLLECTION_OUTPUT = "runsCollection"
# The config key that lets the one update moving a copied ledger through: the ledger's place
# before the move, '<databaseName>/<runsCollection>'.
LEDGER_MOVED_FROM_KEY = "ledgerMovedFrom"
LEDGER_OUTPUTS = (DATABASE_OUTPUT, RUNS_COLLECTION_OUTPUT)


@dataclass(frozen=True)
class KeptSetting:
    """One setting a deployed stack keeps: the config key a user edits, what it names (in the
    error), and the way to move, given (configured, deployed)."""

    key: str
    what: str
    way_to_move: Callable[[str, str], str]


def _region_way(region: str, deployed: str) -> str:
    return (
        "its Firestore database, image repository and sample dataset cannot move under the same "
        f"ids, and its run ledger would stay behind. To deploy in '{region}', create a new stack "
        f"there (`pulumi stack init <name>`, the same config with gcp:region '{region}'), deploy "
        f"it, move the jobs over, then `pulumi destroy` this one; to keep this stack, set "
        f"gcp:region back to '{deployed}'."
    )


def _ledger_way(key: str) -> Callable[[str, str], str]:
    def way(configured: str, deployed: str) -> str:
        return (
            "the function would start on an empty run ledger: a retry of a run that already "
            "completed would run it again, runs in flight would be taken over by nobody, and the "
            "missed-run audit would lose its horizon. To move, either deploy a second stack "
            f"(`pulumi stack init <name>`, the same config with {key} '{configured}'), move the "
            "jobs over, then `pulumi destroy` this one; or, with the jobs paused, copy the "
            f"ledger's records that are still within retention (`retentionSeconds`) from "
            f"'{deployed}' to '{configured}' and set {LEDGER_MOVED_FROM_KEY} to "
            "'<databaseName>/<runsCollection>' as the last update recorded them for the update "
            f'that moves it (docs/deploy.md, "Changing the ledger"). To keep this stack\'s '
            f"ledger, set {key} back to '{deployed}'."
        )

    return way


KEPT_SETTINGS: dict[str, KeptSetting] = {
    REGION_OUTPUT: KeptSetting("gcp:region", "is deployed in", _region_way),
    DATABASE_OUTPUT: KeptSetting(
        "databaseName", "keeps its run ledger in database", _ledger_way("databaseName")
    ),
    RUNS_COLLECTION_OUTPUT: KeptSetting(
        "runsCollection", "keeps its run records in collection", _ledger_way("runsCollection")
    ),
}


def check_unchanged(
    output_name: str, deployed: object, configured: str, stack: str, *, moved_from: str = ""
) -> str:
    """`configured`, unless the stack's last update recorded another value as `output_name`
    (`deployed`; None when the stack has never been deployed, or not since it started recording
    it: a first deploy, or the first update that records it, passes). `moved_from`, when it is
    the recorded value, says the user moved it on purpose (a copied ledger), and it passes."""
    if deployed is None or deployed == "" or deployed == configured:
        return configured
    if moved_from and moved_from == deployed:
        return configured
    kept = KEPT_SETTINGS[output_name]
    raise SettingsError(
        f"{kept.key} is '{configured}', but stack '{stack}' {kept.what} '{deployed}' (its "
        f"`{output_name}` output): {kept.way_to_move(configured, str(deployed))}"
    )


def ledger_moved_from(moved_from: str, output_name: str) -> str:
    """The part of `ledgerMovedFrom` ('<databaseName>/<runsCollection>') that the ledger output
    `output_name` recorded before the move; "" when no move is declared, it is not of that form,
    or `output_name` is not the ledger's (a region is never moved this way)."""
    database, slash, collection = moved_from.partition("/")
    if not slash or not database or not collection or output_name not in LEDGER_OUTPUTS:
        return ""
    return database if output_name == DATABASE_OUTPUT else collection
