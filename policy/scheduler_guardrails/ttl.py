"""The Firestore TTL that keeps the run ledger and the token records from growing forever.

- runs-collection-ttl: the runs collection of every function that keeps run records has a
  TTL on the ledger's expiry field, exempt from indexing (a timestamp that only grows would
  make every write land on the same index range);
- idempotency-collection-ttl: when the token check is deployed, its collection has one too.

The collections and the field are the function's names (`exactly_once.config`,
`exactly_once.token_check.settings`, `exactly_once.ledger.fields`), read from the function's
environment or its defaults, so the pack checks the collection the function writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs

from exactly_once.config import (
    DEFAULT_IDEMPOTENCY_COLLECTION,
    DEFAULT_RUNS_COLLECTION,
    RUNS_COLLECTION_ENV,
)
from exactly_once.ledger.fields import EXPIRE_AT
from exactly_once.token_check.settings import COLLECTION_ENV

from .engine.env import function_env
from .engine.functions import is_token_check, ledger_functions
from .engine.props import MISSING, UNKNOWN, elements, lookup
from .engine.types import FIRESTORE_FIELD, FUNCTION_V2, SCHEDULER_JOB, resources_of


def _field_problems(field: PolicyResource) -> list[str]:
    """Why this expire_at Field does not give the runs collection a working TTL (empty: it does)."""
    problems: list[str] = []
    if lookup(field.props, "ttlConfig") is MISSING:
        problems.append("ttlConfig is missing, so expired run records are never deleted (set ttlConfig: {})")
    index_config = lookup(field.props, "indexConfig")
    if index_config is MISSING:
        problems.append(
            f"indexConfig is missing, so {EXPIRE_AT} keeps Firestore's default single-field indexes "
            "(a monotonically increasing timestamp: write hot-spots); set indexConfig: {} to exempt it"
        )
    else:
        indexes = elements(index_config, "indexes")
        if isinstance(indexes, list) and indexes:
            problems.append(
                f"indexConfig lists {len(indexes)} index(es); remove them so {EXPIRE_AT} is exempt "
                "from indexing"
            )
    return problems


def _missing_ttl_collections(
    fields: list[PolicyResource], collections: Iterable[str | None]
) -> list[str | None]:
    """The collections (None: "some collection") no expire_at Field covers."""
    return [
        collection
        for collection in collections
        if not any(
            collection is None or lookup(f.props, "collection") in (collection, UNKNOWN) for f in fields
        )
    ]


def _ttl_fields(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    return [
        f
        for f in resources_of(resources, FIRESTORE_FIELD)
        if lookup(f.props, "field") in (EXPIRE_AT, UNKNOWN)
    ]


def validate_runs_ttl(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    functions = ledger_functions(args.resources)
    if not functions and not resources_of(args.resources, SCHEDULER_JOB):
        return  # no run ledger in this stack
    collections: set[str] = set()
    for function in functions:
        collection = function_env(function, RUNS_COLLECTION_ENV)
        if isinstance(collection, str) and collection.strip():
            collections.add(collection.strip())
        elif collection is MISSING:
            collections.add(DEFAULT_RUNS_COLLECTION)
    ttl_fields = _ttl_fields(args.resources)
    for field in ttl_fields:
        for problem in _field_problems(field):
            report_violation(f"Firestore field '{field.name}' ({EXPIRE_AT}): {problem}.", field.urn)

    wanted: list[str | None] = [*sorted(collections)] if collections else [None]
    for collection in _missing_ttl_collections(ttl_fields, wanted):
        name = f"'{collection}'" if collection else "of run records"
        shown = repr(collection or "<runs collection>")
        report_violation(
            f"The runs collection {name} has no TTL field: without it run records are kept forever. "
            f"Add gcp.firestore.Field(collection={shown}, field='{EXPIRE_AT}', "
            "ttl_config={}, index_config={}).",
            None,
        )


def validate_idempotency_ttl(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Token records expire like run records; the field's own problems (ttlConfig, indexes) are
    reported once, by runs-collection-ttl, which checks every expire_at Field."""
    collections: set[str] = set()
    unknown = False
    for function in resources_of(args.resources, FUNCTION_V2):
        if not is_token_check(function.props):
            continue
        collection = function_env(function, COLLECTION_ENV)
        if isinstance(collection, str) and collection.strip():
            collections.add(collection.strip())
        elif collection is UNKNOWN:
            unknown = True
        else:
            collections.add(DEFAULT_IDEMPOTENCY_COLLECTION)  # what the function falls back to
    wanted: list[str | None] = [*sorted(collections)]
    if unknown and not collections:
        wanted = [None]
    for collection in _missing_ttl_collections(_ttl_fields(args.resources), wanted):
        shown = repr(collection or f"<{COLLECTION_ENV}>")
        report_violation(
            f"The token check deploys, but its collection {shown} has no TTL field: token records "
            f"would be kept forever. Add gcp.firestore.Field(collection={shown}, field='{EXPIRE_AT}', "
            "ttl_config={}, index_config={}).",
            None,
        )
