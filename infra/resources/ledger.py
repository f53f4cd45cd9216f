"""The run ledger's Firestore side: the database (unless an existing one is used), the TTL
policy on run records and the indexing exemptions that keep the run collection fast.

Firestore runs one field operation per database at a time, so every field setting here waits
for the one before it, and `LedgerDatabase.last_field` is what a further field setting of the stack
(the token records' TTL) waits for. Every field setting takes `field_options`: how long its
operation may take, and whether `pulumi destroy` leaves it in place.
"""

from __future__ import annotations

from typing import NamedTuple

import pulumi
import pulumi_gcp as gcp

from exactly_once.ledger.fields import EXPIRE_AT, UNINDEXED_RUN_FIELDS
from infra.settings.stack import StackSettings

# How long one field operation may take before the update fails. The provider's default is 20
# minutes; a TTL policy or an index exemption on a collection that already holds many
# documents can take longer, and each operation here waits for the one before it.
FIELD_OPERATION_TIMEOUT = "60m"


class LedgerDatabase(NamedTuple):
    # The database resource, or None when the stack uses an existing one as it is.
    database: gcp.firestore.Database | None
    database_name: pulumi.Output[str]
    runs_ttl: gcp.firestore.Field
    last_field: gcp.firestore.Field


def ledger_database(
    name: str, settings: StackSettings, *, parent: pulumi.Resource, firestore_api: pulumi.Resource
) -> LedgerDatabase:
    database: gcp.firestore.Database | None = None
    database_name: pulumi.Output[str] = pulumi.Output.from_input(settings.database_name)
    after: pulumi.Resource = firestore_api
    if settings.create_database:
        # Deletion protection guards the records that make retries idempotent: Firestore's
        # refuses a delete, and Pulumi's (`protect`) refuses any plan that would delete or
        # replace the database, a changed databaseName among them, before Google Cloud is
        # asked. `pulumi destroy` stops at it until `pulumi state unprotect`; then it is
        # abandoned (kept), not deleted.
        database = gcp.firestore.Database(
            f"{name}-database",
            project=settings.project,
            name=settings.database_name,
            # gcp:region unless databaseLocation says otherwise: a stack with a second region
            # needs a multi-region location (infra/settings/region_checks.py).
            location_id=settings.ledger_location,
            type="FIRESTORE_NATIVE",
            delete_protection_state=(
                "DELETE_PROTECTION_ENABLED" if settings.deletion_protection else "DELETE_PROTECTION_DISABLED"
            ),
            deletion_policy="ABANDON" if settings.deletion_protection else "DELETE",
            opts=pulumi.ResourceOptions(
                parent=parent, depends_on=[firestore_api], protect=settings.deletion_protection
            ),
        )
        database_name = database.name
        after = database
    # One TTL policy for every job: expired run records are deleted by Firestore, and the field
    # is exempt from indexing (it is only ever written, never queried). On an existing database
    # (createDatabase: false) these field settings are this stack's only resources in it.
    runs_ttl = gcp.firestore.Field(
        f"{name}-runs-ttl",
        project=settings.project,
        database=database_name,
        collection=settings.runs_collection,
        field=EXPIRE_AT,
        ttl_config={},
        index_config={},
        opts=field_options(settings, parent, after),
    )
    # Claim, completion and schedule times only ever grow and no query filters on them: left
    # indexed, they would cap the run collection at about 500 writes a second.
    last = runs_ttl
    for field in UNINDEXED_RUN_FIELDS:
        last = gcp.firestore.Field(
            f"{name}-runs-unindexed-{field.replace('_', '-')}",
            project=settings.project,
            database=database_name,
            collection=settings.runs_collection,
            field=field,
            index_config={},
            opts=field_options(settings, parent, last),
        )
    return LedgerDatabase(database=database, database_name=database_name, runs_ttl=runs_ttl, last_field=last)


def field_options(
    settings: StackSettings, parent: pulumi.Resource, after: pulumi.Resource
) -> pulumi.ResourceOptions:
    """The options of every Firestore field setting of the stack.

    Deleting a field resource turns its TTL policy off and restores the field's indexing. With
    `deletionProtection` the database and its records outlive `pulumi destroy`, so their field
    settings must too: retained, the kept records still expire and stay unindexed. (A stack
    brought up again sets the same fields: the provider's create is an update of the field's
    configuration, which exists with its database.)
    """
    return pulumi.ResourceOptions(
        parent=parent,
        depends_on=[after],
        retain_on_delete=settings.deletion_protection,
        custom_timeouts=pulumi.CustomTimeouts(
            create=FIELD_OPERATION_TIMEOUT, update=FIELD_OPERATION_TIMEOUT, delete=FIELD_OPERATION_TIMEOUT
        ),
    )
