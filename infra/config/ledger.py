"""The run ledger's config keys: which database, which collections, how long records live.

They are checked together because each constrains another: `createDatabase` depends on
`databaseName`, the token records need a collection apart from the run records, and a token
must outlive the run it guards. Like infra/settings/stack.py, which builds StackSettings from them,
this module imports no Pulumi: the local tools read the same ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from exactly_once.config import is_collection_id
from infra.config.schema import DEFAULT_DATABASE, integer_value
from policy.scheduler_guardrails.rules.config.names import DATABASE_ID
from policy.scheduler_guardrails.rules.config.problems import ConfigProblems


class LedgerKeys(NamedTuple):
    """The ledger's keys once checked, for StackSettings to carry."""

    # "": the stack's own database (named by policy/scheduler_guardrails/rules/config/names.py);
    # else the configured id.
    database: str
    create_database: bool
    runs_collection: str
    idempotency_collection: str
    retention_seconds: int
    idempotency_retention_seconds: int


def ledger_keys(scalars: Mapping[str, Any], errors: ConfigProblems) -> LedgerKeys:
    """The ledger's keys from the type-checked `scalars` (config_schema.scalar_value), each
    problem appended to `errors` with the key to edit."""
    database = str(scalars["databaseName"])
    if database not in ("", DEFAULT_DATABASE) and not DATABASE_ID.match(database):
        errors.append(
            f"{errors.key('databaseName')}: {database!r} is not a Firestore database id "
            f"(4-63 of a-z, 0-9, '-', starting with a letter), {DEFAULT_DATABASE!r}, or empty "
            "(the stack's own database)"
        )
    create = scalars["createDatabase"]
    create_database = database != DEFAULT_DATABASE if create is None else bool(create)
    if create_database and database == DEFAULT_DATABASE:
        errors.append(
            f"{errors.key('createDatabase')}: the {DEFAULT_DATABASE} database is never created by a "
            "stack (it usually exists, and a create would fail with 409); leave createDatabase unset"
        )
    collection = str(scalars["runsCollection"])
    if not is_collection_id(collection):
        errors.append(f"{errors.key('runsCollection')}: {collection!r} is not a top-level collection id")
    token_collection = str(scalars["idempotencyCollection"])
    if not is_collection_id(token_collection):
        errors.append(
            f"{errors.key('idempotencyCollection')}: {token_collection!r} is not a top-level collection id"
        )
    elif token_collection == collection:
        errors.append(
            f"{errors.key('idempotencyCollection')}: {token_collection!r} is also the runsCollection; "
            "token records and run records need collections of their own"
        )
    token_retention = integer_value(scalars["idempotencyRetentionSeconds"])
    retention = integer_value(scalars["retentionSeconds"])
    if token_retention < retention:
        # A duplicate execution can start as late as the last retry of the run, which the
        # run record outlives by design; the token has to outlive it as well.
        errors.append(
            f"{errors.key('idempotencyRetentionSeconds')}, {errors.key('retentionSeconds')}: "
            f"token retention {token_retention}s is shorter than the run retention {retention}s: "
            "a late duplicate execution would find no token and change state again"
        )
    return LedgerKeys(database, create_database, collection, token_collection, retention, token_retention)
