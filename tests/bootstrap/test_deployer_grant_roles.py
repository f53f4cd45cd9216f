"""The deployer can set the IAM policy of every resource the stack grants the runtime account a
role on: with a job's secret and a topic grant configured, and the bootstrap's `jobGrants`
naming their kinds, its roles hold secretmanager.secrets.setIamPolicy and
pubsub.topics.setIamPolicy; without such grants it holds neither role."""

from __future__ import annotations

import pytest

from bootstrap.settings import BootstrapConfigError, BootstrapSettings
from policy.scheduler_guardrails.rules.config.access import GRANT_KINDS, KINDS_BY_TYPE
from policy.scheduler_guardrails.rules.config.deployer_roles import (
    DEPLOYER_ROLES,
    GRANT_KIND_ROLES,
    deployer_roles,
)
from tests.bootstrap.mocked_bootstrap import run_bootstrap
from tests.bootstrap.policy_run import violations
from tests.infra.conftest import PROJECT, build, valid_job, valid_values
from tools.mocked_program import MockedResource, mock_stack

REPO = "acme/exactly-once-scheduler"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
DEPLOYER = f"serviceAccount:ci-deployer@{PROJECT}.iam.gserviceaccount.com"

# The permission the IAM member resource of each grant kind uses (its setIamPolicy), from
# Google's IAM reference.
SET_IAM_POLICY = {
    "cloudRunJob": "run.jobs.setIamPolicy",
    "cloudRunService": "run.services.setIamPolicy",
    "dataset": "bigquery.datasets.setIamPolicy",
    "secret": "secretmanager.secrets.setIamPolicy",
    "topic": "pubsub.topics.setIamPolicy",
    "subscription": "pubsub.subscriptions.setIamPolicy",
    "bucket": "storage.buckets.setIamPolicy",
}
# The setIamPolicy permissions each deployer role holds, from Google's roles reference.
ROLE_PERMISSIONS = {
    "roles/run.admin": {"run.jobs.setIamPolicy", "run.services.setIamPolicy"},
    "roles/bigquery.dataOwner": {"bigquery.datasets.setIamPolicy"},
    "roles/storage.admin": {"storage.buckets.setIamPolicy"},
    "roles/secretmanager.admin": {"secretmanager.secrets.setIamPolicy"},
    "roles/pubsub.admin": {"pubsub.topics.setIamPolicy", "pubsub.subscriptions.setIamPolicy"},
}


def permissions(roles: set[str]) -> set[str]:
    return set().union(*(ROLE_PERMISSIONS.get(role, set()) for role in roles))


def deployer_roles_granted(job_grants: list[str]) -> set[str]:
    values: dict[str, object] = {"repository": REPO}
    if job_grants:
        values["jobGrants"] = job_grants
    resources, _ = run_bootstrap(BootstrapSettings.from_config(values, project=PROJECT))
    return {
        r.inputs["role"] for r in resources if r.type == PROJECT_MEMBER and r.inputs["member"] == DEPLOYER
    }


def test_every_grant_kind_is_settable_by_the_deployer_with_its_kind_in_job_grants() -> None:
    assert set(SET_IAM_POLICY) == {kind.key for kind in GRANT_KINDS}
    for kind, permission in SET_IAM_POLICY.items():
        roles = {role.role for role in deployer_roles([kind] if kind in GRANT_KIND_ROLES else [])}
        assert permission in permissions(roles), kind
    # Those of GRANT_KIND_ROLES are the ones no role of the base list holds.
    base = permissions({role.role for role in DEPLOYER_ROLES})
    assert {kind for kind, permission in SET_IAM_POLICY.items() if permission not in base} == set(
        GRANT_KIND_ROLES
    )


def test_a_stack_with_a_secret_and_a_topic_grant_is_deployable_by_a_deployer_bootstrapped_for_them() -> None:
    stack = mock_stack(
        build(
            valid_values(
                jobs=[
                    valid_job(
                        secrets={"API_KEY": "api-key"},
                        grants=[
                            {"role": "roles/pubsub.publisher", "topic": f"projects/{PROJECT}/topics/orders"}
                        ],
                    )
                ]
            )
        )
    )
    kinds = sorted({KINDS_BY_TYPE[r.type].key for r in stack.resources if r.type in KINDS_BY_TYPE})
    assert {"secret", "topic"} <= set(kinds)
    needed = {SET_IAM_POLICY[kind] for kind in kinds}
    # What the bootstrap's `jobGrants` must name: the kinds beyond the base roles.
    job_grants = [kind for kind in kinds if kind in GRANT_KIND_ROLES]
    held = deployer_roles_granted(job_grants)
    assert needed <= permissions(held)
    assert {"roles/secretmanager.admin", "roles/pubsub.admin"} <= held
    # Without them, the deployer would meet a 403 on both grants.
    missing = needed - permissions(deployer_roles_granted([]))
    assert missing == {"secretmanager.secrets.setIamPolicy", "pubsub.topics.setIamPolicy"}


def test_without_job_grants_the_deployer_holds_exactly_the_base_roles() -> None:
    assert deployer_roles_granted([]) == {role.role for role in DEPLOYER_ROLES}


def test_a_topic_and_a_subscription_share_one_role_granted_once() -> None:
    roles = [role.role for role in deployer_roles(["topic", "subscription", "secret"])]
    assert len(roles) == len(set(roles)) == len(DEPLOYER_ROLES) + 2
    assert deployer_roles_granted(["subscription", "topic"]) == {role.role for role in DEPLOYER_ROLES} | {
        "roles/pubsub.admin"
    }


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("secret", "expected a list"),
        (["secret", "dataset"], "'dataset'"),
        (["bucket"], "'bucket'"),
        (["topic", "topic"], "each kind once"),
    ],
)
def test_job_grants_refuses_what_it_cannot_grant_for_naming_the_key(value: object, shown: str) -> None:
    with pytest.raises(BootstrapConfigError, match=r"^jobGrants ") as raised:
        BootstrapSettings.from_config({"repository": REPO, "jobGrants": value}, project=PROJECT)
    assert shown in str(raised.value)
    if isinstance(value, list) and "each kind once" not in shown:
        assert all(kind in str(raised.value) for kind in GRANT_KIND_ROLES)


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_a_deployer_bootstrapped_for_job_grants_passes_every_policy(preview: bool) -> None:
    """The pack allows the roles of GRANT_KIND_ROLES project-wide for the CI deployer alone."""
    settings = BootstrapSettings.from_config(
        {"repository": REPO, "jobGrants": ["secret", "topic", "subscription"]}, project=PROJECT
    )
    resources, _ = run_bootstrap(settings, preview)
    roles = {r.inputs["role"] for r in resources if r.type == PROJECT_MEMBER}
    assert {"roles/secretmanager.admin", "roles/pubsub.admin"} <= roles
    assert violations(resources, preview) == []


def test_the_pack_refuses_those_roles_to_an_account_that_is_not_the_deployer() -> None:
    """Guards the test above: the same grant to the previewer is caught."""
    resources, _ = run_bootstrap(
        BootstrapSettings.from_config({"repository": REPO, "jobGrants": ["secret"]}, project=PROJECT)
    )
    previewer = f"serviceAccount:ci-previewer@{PROJECT}.iam.gserviceaccount.com"
    moved = [
        MockedResource(
            r.type,
            r.name,
            r.urn,
            r.inputs | {"member": previewer},
            r.outputs | {"member": previewer},
            r.parent,
            r.custom,
        )
        if r.type == PROJECT_MEMBER and r.inputs["role"] == "roles/secretmanager.admin"
        else r
        for r in resources
    ]
    found = violations(moved)
    assert any("roles/secretmanager.admin" in v for v in found), found
