"""The one list of project-wide roles (policy/scheduler_guardrails/identities/allowlist.py) and
project-iam-allowlist."""

from __future__ import annotations

from infra.config.schema import REPO_ROOT
from policy.scheduler_guardrails.offline import UNKNOWN_STRING
from policy.scheduler_guardrails.policies import (
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_ROLE_ALLOWLIST,
    Holder,
)
from policy.scheduler_guardrails.rules.config.deployer_roles import DEPLOYER_ROLES, GRANT_KIND_ROLES
from policy.tests import fixtures
from policy.tests.crafted import RUN_INVOKER_MEMBER, check
from tests.support.optional import needs_proxy_kinds, proxy_kind


@needs_proxy_kinds
def test_allowlist_has_a_reason_for_every_role() -> None:
    assert set(PROJECT_ROLE_ALLOWLIST) == {
        "roles/datastore.user",
        "roles/workflows.invoker",
        "roles/bigquery.jobUser",
        "roles/logging.logWriter",
        "roles/storage.objectViewer",
    } | {deployer_role.role for deployer_role in (*DEPLOYER_ROLES, *GRANT_KIND_ROLES.values())}
    # The roles the bootstrap's `jobGrants` add are the deployer's alone.
    assert {PROJECT_ROLE_ALLOWLIST[r.role].holders for r in GRANT_KIND_ROLES.values()} == {
        (Holder.CI_DEPLOYER,)
    }
    # The previewer shares the deployer's one read-only project role; every other is the deployer's.
    assert {r.role: PROJECT_ROLE_ALLOWLIST[r.role].holders for r in DEPLOYER_ROLES} == {
        r.role: (Holder.CI_DEPLOYER, Holder.CI_PREVIEWER)
        if r.role == "roles/browser"
        else (Holder.CI_DEPLOYER,)
        for r in DEPLOYER_ROLES
    }
    # The scheduled function's and the token check's: both are a function's runtime account.
    assert PROJECT_ROLE_ALLOWLIST["roles/datastore.user"].holders == (Holder.FUNCTION_RUNTIME,)
    assert PROJECT_ROLE_ALLOWLIST["roles/logging.logWriter"].holders == (Holder.FUNCTION_BUILD,)
    assert PROJECT_ROLE_ALLOWLIST["roles/storage.objectViewer"].holders == (Holder.FUNCTION_BUILD,)
    assert PROJECT_ROLE_ALLOWLIST["roles/storage.objectViewer"].condition is not None
    assert all(allowed.reason.strip() for allowed in PROJECT_ROLE_ALLOWLIST.values())
    for role, key in (("roles/workflows.invoker", "workflow"), ("roles/bigquery.jobUser", "bigquery")):
        module = proxy_kind(key).handler_module
        # The proxy job the function ships (function/jobs/).
        assert (REPO_ROOT / "function" / f"{module.replace('.', '/')}.py").is_file(), module
        allowed = PROJECT_ROLE_ALLOWLIST[role]
        assert (allowed.holders, allowed.proxy_module) == ((Holder.PROXY_RUNTIME,), module)
        assert (
            allowed.holders_shown()
            == f"the runtime account of a function whose JOB_HANDLER or job table handlers use {module}"
        )


@needs_proxy_kinds
def test_allow_listed_project_grants_to_service_accounts_pass() -> None:
    assert check("project-iam-allowlist", PROJECT_IAM_MEMBER, fixtures.datastore_grant()) == []
    workflows = {"role": "roles/workflows.invoker", "member": f"serviceAccount:{fixtures.RUNTIME_SA}"}
    assert check("project-iam-allowlist", PROJECT_IAM_MEMBER, workflows) == []


def test_other_project_role_is_reported() -> None:
    grant = {"role": "roles/run.invoker", "member": f"serviceAccount:{fixtures.INVOKER_SA}"}
    [message] = check("project-iam-allowlist", PROJECT_IAM_MEMBER, grant)
    assert "role roles/run.invoker is granted project-wide" in message
    assert "PROJECT_ROLE_ALLOWLIST" in message and "specific resource" in message


def test_project_grant_to_a_user_is_reported() -> None:
    grant = fixtures.datastore_grant() | {"member": "user:someone@example.com"}
    [message] = check("project-iam-allowlist", PROJECT_IAM_MEMBER, grant)
    assert "'user:someone@example.com' is not a service account" in message


def test_authoritative_project_binding_is_reported() -> None:
    binding = {"role": "roles/datastore.user", "members": [f"serviceAccount:{fixtures.RUNTIME_SA}"]}
    [message] = check("project-iam-allowlist", PROJECT_IAM_BINDING, binding)
    assert "authoritative" in message and "gcp.projects.IAMMember" in message


def test_resource_level_grants_are_not_project_grants() -> None:
    assert check("project-iam-allowlist", RUN_INVOKER_MEMBER, fixtures.run_invoker_grant()) == []


def test_unknown_project_role_and_member_are_not_reported() -> None:
    grant = {"role": UNKNOWN_STRING, "member": UNKNOWN_STRING}
    assert check("project-iam-allowlist", PROJECT_IAM_MEMBER, grant) == []
