"""The Firestore TTL on the run ledger and the token records (ttl.py): runs-collection-ttl
and idempotency-collection-ttl."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import EnforcementLevel, PolicyResource

from ..scheduler_guardrails.offline import (
    UNKNOWN_STRING,
    Reported,
    run_stack_policy,
    stack_policy,
    stack_resource,
)
from ..scheduler_guardrails.policies import FIRESTORE_FIELD, FUNCTION_V2, SCHEDULER_JOB
from . import fixtures


def ttl(resources: list[PolicyResource]) -> Reported:
    return run_stack_policy(stack_policy("runs-collection-ttl"), resources)


# --- runs-collection-ttl --------------------------------------------------------------------


def test_ttl_field_with_exempt_index_passes() -> None:
    assert ttl(fixtures.stack(field=fixtures.ttl_field())).violations == []


def test_missing_ttl_field_is_reported_against_the_stack() -> None:
    [(message, urn)] = ttl(fixtures.stack()).violations
    assert urn is None
    assert "'scheduler_runs' has no TTL field" in message and "field='expire_at'" in message


def test_ttl_field_on_another_collection_does_not_count() -> None:
    field = fixtures.ttl_field() | {"collection": "other"}
    [(message, _)] = ttl(fixtures.stack(field=field)).violations
    assert "'scheduler_runs' has no TTL field" in message


def test_runs_collection_comes_from_the_function_env() -> None:
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["RUNS_COLLECTION"] = "runs_b"
    field = fixtures.ttl_field() | {"collection": "runs_b"}
    assert ttl(fixtures.stack(function=function, field=field)).violations == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"ttlConfig": None}, "ttlConfig is missing"),
        ({"indexConfig": None}, "indexConfig is missing"),
        ({"indexConfig": {"indexes": [{"order": "ASCENDING", "queryScope": "COLLECTION"}]}}, "lists 1 index"),
    ],
)
def test_broken_ttl_field_is_reported_on_the_field(change: dict[str, Any], expected: str) -> None:
    field = {k: v for k, v in (fixtures.ttl_field() | change).items() if v is not None}
    resources = fixtures.stack(field=field)
    [(message, urn)] = ttl(resources).violations
    assert expected in message and "expire_at" in message
    assert urn == resources[-1].urn


def test_unknown_ttl_field_values_are_not_reported() -> None:
    field = fixtures.ttl_field() | {"collection": UNKNOWN_STRING, "ttlConfig": UNKNOWN_STRING}
    assert ttl(fixtures.stack(field=field)).violations == []


def test_stack_without_jobs_or_functions_needs_no_ttl() -> None:
    assert ttl([stack_resource("gcp:storage/bucket:Bucket", "b", fixtures.bucket())]).violations == []


# --- idempotency-collection-ttl -------------------------------------------------------------


def test_idempotency_ttl_level_is_mandatory() -> None:
    assert stack_policy("idempotency-collection-ttl").enforcement_level == EnforcementLevel.MANDATORY


def tokens_field(collection: str = "idempotency_tokens") -> dict[str, Any]:
    return fixtures.ttl_field() | {"collection": collection}


def ttl_stack(*fields: dict[str, Any], token: dict[str, Any] | None = None) -> list[PolicyResource]:
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", fixtures.function()),
        stack_resource(SCHEDULER_JOB, "eos-job-demo", fixtures.job()),
        stack_resource(FIRESTORE_FIELD, "eos-runs-ttl", fixtures.ttl_field()),
    ]
    if token is not None:
        resources.append(stack_resource(FUNCTION_V2, "eos-token-check", token))
    resources += [stack_resource(FIRESTORE_FIELD, f"f{i}", f) for i, f in enumerate(fields)]
    return resources


def token_ttl(resources: list[PolicyResource]) -> Reported:
    return run_stack_policy(stack_policy("idempotency-collection-ttl"), resources)


def test_token_check_without_a_ttl_on_its_collection_is_rejected() -> None:
    [(message, urn)] = token_ttl(ttl_stack(token=fixtures.token_check())).violations
    assert urn is None
    assert (
        "its collection 'idempotency_tokens' has no TTL field" in message and "field='expire_at'" in message
    )


def test_token_check_with_its_ttl_passes_and_no_token_check_needs_none() -> None:
    assert token_ttl(ttl_stack(tokens_field(), token=fixtures.token_check())).violations == []
    assert token_ttl(ttl_stack()).violations == []


def test_token_collection_comes_from_env_with_the_function_default() -> None:
    custom = fixtures.token_check({"IDEMPOTENCY_COLLECTION": "tokens_b"})
    [(message, _)] = token_ttl(ttl_stack(tokens_field(), token=custom)).violations
    assert "'tokens_b'" in message
    assert token_ttl(ttl_stack(tokens_field("tokens_b"), token=custom)).violations == []
    defaulted = fixtures.token_check()
    del defaulted["serviceConfig"]["environmentVariables"]["IDEMPOTENCY_COLLECTION"]
    assert len(token_ttl(ttl_stack(token=defaulted)).violations) == 1
    assert token_ttl(ttl_stack(tokens_field(), token=defaulted)).violations == []


def test_unknown_token_collection_or_field_collection_is_not_a_false_positive() -> None:
    unknown = fixtures.token_check({"IDEMPOTENCY_COLLECTION": UNKNOWN_STRING})
    # Unknown collection: the runs TTL field counts as "some expire_at field".
    assert token_ttl(ttl_stack(token=unknown)).violations == []
    unknown_field = tokens_field(UNKNOWN_STRING)
    assert token_ttl(ttl_stack(unknown_field, token=fixtures.token_check())).violations == []


def test_token_check_is_not_a_ledger_function_for_the_runs_ttl() -> None:
    # Its env has no RUNS_COLLECTION; it must not demand a TTL on the default 'scheduler_runs'.
    function = fixtures.function()
    function["serviceConfig"]["environmentVariables"]["RUNS_COLLECTION"] = "runs_b"
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", function),
        stack_resource(FUNCTION_V2, "eos-token-check", fixtures.token_check()),
        stack_resource(FIRESTORE_FIELD, "runs", fixtures.ttl_field() | {"collection": "runs_b"}),
        stack_resource(FIRESTORE_FIELD, "tokens", tokens_field()),
    ]
    assert run_stack_policy(stack_policy("runs-collection-ttl"), resources).violations == []
