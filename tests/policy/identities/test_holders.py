"""project-role-holders (policy/scheduler_guardrails/identities/holders.py): each allow-listed
project role is held only by the account it is listed for: the Workflows and BigQuery proxies'
runtime accounts, the runtime account for roles/datastore.user, the build account for
roles/logging.logWriter."""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel

from policy.scheduler_guardrails.engine.types import BUCKET_OBJECT
from policy.scheduler_guardrails.offline import (
    UNKNOWN_STRING,
    Reported,
    run_stack_policy,
    stack_policy,
    stack_resource,
)
from policy.scheduler_guardrails.policies import FUNCTION_V2, PROJECT_IAM_MEMBER
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from policy.tests import fixtures
from tests.support.optional import needs_proxy_kinds, proxy_kind


def test_level_is_mandatory() -> None:
    assert stack_policy("project-role-holders").enforcement_level == EnforcementLevel.MANDATORY


# --- the proxies' and the runtime account's roles -------------------------------------------


# The Workflows proxy's handler while the kind is present: the tests that run it skip without it,
# and the others only need some table in the function's source.
WORKFLOWS_HANDLER = next(
    (kind.handler for kind in TARGET_KINDS if kind.key == "workflow"), "jobs.noop:do_nothing"
)


OTHER_SA = "someone@my-project.iam.gserviceaccount.com"


def proxy_function(**env: str) -> dict[str, Any]:
    """A function whose table (PROXY_TABLE, in its source) runs the Workflows proxy for a job."""
    function = fixtures.with_table(fixtures.function())
    function["serviceConfig"]["environmentVariables"] |= {"JOB_HANDLER": "jobs.demo:run_demo_job"} | env
    return function


PROXY_TABLE = fixtures.table_of({"report": {"handler": WORKFLOWS_HANDLER}})


def grant(role: str, account: Any) -> dict[str, Any]:
    member = account if account == UNKNOWN_STRING else f"serviceAccount:{account}"
    return {"project": "my-project", "role": role, "member": member}


def holders(function: dict[str, Any], *grants: dict[str, Any], table: str | None = PROXY_TABLE) -> Reported:
    """The policy on `function`, its source object holding `table` (None: not known yet)."""
    resources = [stack_resource(FUNCTION_V2, "eos-function", function)]
    resources.append(stack_resource(BUCKET_OBJECT, "eos-source-zip", fixtures.source_object(table)))
    resources += [stack_resource(PROJECT_IAM_MEMBER, f"grant-{i}", g) for i, g in enumerate(grants)]
    return run_stack_policy(stack_policy("project-role-holders"), resources)


@needs_proxy_kinds
def test_workflows_invoker_for_the_proxy_functions_runtime_account_passes() -> None:
    reported = holders(
        proxy_function(),
        grant("roles/workflows.invoker", fixtures.RUNTIME_SA),
        fixtures.datastore_grant(),
    )
    assert reported.violations == []


@needs_proxy_kinds
def test_workflows_invoker_via_job_handler_alone_passes() -> None:
    function = proxy_function(JOB_HANDLER=WORKFLOWS_HANDLER)
    invoker = grant("roles/workflows.invoker", fixtures.RUNTIME_SA.upper())
    assert holders(function, invoker, table=fixtures.table_of({})).violations == []


@needs_proxy_kinds
def test_workflows_invoker_for_another_account_is_rejected() -> None:
    [(message, urn)] = holders(proxy_function(), grant("roles/workflows.invoker", OTHER_SA)).violations
    assert urn is not None and urn.endswith("::grant-0")
    assert f"roles/workflows.invoker is granted project-wide to 'serviceAccount:{OTHER_SA}'" in message
    assert (
        "whose JOB_HANDLER or job table handlers use jobs.workflows" in message
        and fixtures.RUNTIME_SA in message
    )


@needs_proxy_kinds
def test_workflows_invoker_without_a_proxy_job_is_rejected() -> None:
    [(message, _)] = holders(
        fixtures.function(), grant("roles/workflows.invoker", fixtures.RUNTIME_SA)
    ).violations
    assert "found: none in this stack" in message and "needs no grant" in message


def test_datastore_user_for_a_non_runtime_account_is_rejected() -> None:
    other = fixtures.datastore_grant() | {"member": f"serviceAccount:{OTHER_SA}"}
    [(message, _)] = holders(fixtures.function(), other).violations
    assert "roles/datastore.user" in message and "the runtime account of a function in this stack" in message


def test_not_allow_listed_or_non_service_account_grants_are_left_to_the_allowlist_policy() -> None:
    assert holders(fixtures.function(), grant("roles/pubsub.publisher", OTHER_SA)).violations == []
    user = {"role": "roles/datastore.user", "member": "user:someone@example.com"}
    assert holders(fixtures.function(), user).violations == []


@needs_proxy_kinds
def test_unknown_member_account_or_handlers_are_not_reported() -> None:
    assert holders(proxy_function(), grant("roles/workflows.invoker", UNKNOWN_STRING)).violations == []
    unknown_account = proxy_function()
    unknown_account["serviceConfig"]["serviceAccountEmail"] = UNKNOWN_STRING
    assert holders(unknown_account, grant("roles/workflows.invoker", OTHER_SA)).violations == []
    # A table not known until the update (a first preview).
    assert holders(proxy_function(), grant("roles/workflows.invoker", OTHER_SA), table=None).violations == []
    unknown_service = fixtures.function() | {"serviceConfig": UNKNOWN_STRING}
    assert holders(unknown_service, grant("roles/workflows.invoker", OTHER_SA)).violations == []


RUNTIME = f"serviceAccount:{fixtures.RUNTIME_SA}"


@needs_proxy_kinds
def test_job_user_is_held_only_by_the_bigquery_proxy_s_runtime_account() -> None:
    grant = {"project": "my-project", "role": "roles/bigquery.jobUser", "member": RUNTIME}
    plain = fixtures.stack_with(PROJECT_IAM_MEMBER, grant)
    [message] = run_stack_policy(stack_policy("project-role-holders"), plain).messages
    bigquery = proxy_kind("bigquery")
    assert bigquery.handler_module in message
    function = fixtures.with_table(fixtures.function())
    table = fixtures.table_of({"eos-prod_rollup": {"handler": bigquery.handler}})
    proxy = [
        *fixtures.stack_with(PROJECT_IAM_MEMBER, grant, function),
        stack_resource(BUCKET_OBJECT, "eos-source-zip", fixtures.source_object(table)),
    ]
    assert run_stack_policy(stack_policy("project-role-holders"), proxy).messages == []


# --- roles/logging.logWriter belongs to the build account -----------------------------------


def with_build_account(account: Any) -> dict[str, Any]:
    function = fixtures.function()
    function["buildConfig"]["serviceAccount"] = account
    return function


def log_writer_holders(function: dict[str, Any], member: str) -> list[str]:
    found = stack_policy("project-role-holders")
    grant = {"project": "my-project", "role": "roles/logging.logWriter", "member": member}
    resources = [
        stack_resource(FUNCTION_V2, "eos-function", function),
        stack_resource(PROJECT_IAM_MEMBER, "eos-builder-log-writer", grant),
    ]
    return run_stack_policy(found, resources).messages


def test_log_writer_for_the_build_account_passes() -> None:
    assert log_writer_holders(fixtures.function(), f"serviceAccount:{fixtures.BUILDER_SA}") == []


def test_log_writer_for_the_runtime_account_is_rejected() -> None:
    [message] = log_writer_holders(fixtures.function(), f"serviceAccount:{fixtures.RUNTIME_SA}")
    assert "roles/logging.logWriter is granted project-wide" in message
    assert "the build account (buildConfig.serviceAccount)" in message and fixtures.BUILDER_SA in message


def test_log_writer_with_unknown_build_account_is_not_reported() -> None:
    assert (
        log_writer_holders(with_build_account(UNKNOWN_STRING), f"serviceAccount:{fixtures.RUNTIME_SA}") == []
    )
