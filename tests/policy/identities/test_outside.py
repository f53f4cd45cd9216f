"""`grants-to-own-accounts-only` on the main stack: the CI previewer is an account the stack does
not create, so no role reaches it from here, whatever its name; the shipped stacks pass."""

from __future__ import annotations

import re
from typing import Any

import pytest

import tools.mocked_program as harness
from infra.config.schema import read_yaml
from policy.scheduler_guardrails.engine.types import is_iam_type
from policy.scheduler_guardrails.identities import outside
from policy.scheduler_guardrails.offline import UNKNOWN_STRING, violations
from tests.support.stacks import FIXTURE_STACKS, dev_stack_resources, fixture_stack
from tools.mocked_program import MockedResource

POLICY = "grants-to-own-accounts-only"
# Read, not validated: the module is collected in any checkout, a fork's without the kinds the
# dev stack's jobs use among them.
PROJECT = read_yaml(FIXTURE_STACKS / "Pulumi.dev.yaml")["config"]["gcp:project"]
PREVIEWER = f"serviceAccount:ci-previewer@{PROJECT}.iam.gserviceaccount.com"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
PUBSUB_AGENT = "serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com"
TOKEN_CREATOR = "roles/iam.serviceAccountTokenCreator"


@pytest.fixture(scope="module")
def dev() -> list[MockedResource]:
    return dev_stack_resources()


def grant(type_: str, name: str, props: dict[str, Any]) -> MockedResource:
    return MockedResource(type_, name, f"urn:pulumi:dev::test::{type_}::{name}", props, props)


def bucket_grant(dev: list[MockedResource], role: str, member: str) -> MockedResource:
    (bucket,) = [r for r in dev if r.type == "gcp:storage/bucket:Bucket"]
    return grant(
        BUCKET_MEMBER,
        "extra-bucket-grant",
        {"bucket": bucket.outputs["name"], "role": role, "member": member},
    )


def runtime_account(dev: list[MockedResource]) -> MockedResource:
    return next(r for r in dev if r.type == ACCOUNT and r.inputs["accountId"].endswith("-runtime"))


def token_creator_grant(dev: list[MockedResource], member: str) -> MockedResource:
    return grant(
        ACCOUNT_MEMBER,
        "extra-token-creator",
        {"serviceAccountId": runtime_account(dev).outputs["name"], "role": TOKEN_CREATOR, "member": member},
    )


def found(resources: list[MockedResource]) -> list[str]:
    every = violations((r.type, r.name, r.inputs, r.outputs) for r in resources)
    return [v.removeprefix(f"{POLICY}: ") for v in every if v.startswith(f"{POLICY}:")]


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_the_shipped_stacks_grant_only_to_their_own_accounts(stack_name: str, preview: bool) -> None:
    resources = harness.run_mocked_stack(fixture_stack(stack_name), preview=preview)
    as_engine_sends = [
        MockedResource(
            r.type, r.name, r.urn, harness.as_policy_value(r.inputs), harness.as_policy_value(r.outputs)
        )
        for r in resources
    ]
    members = [r.outputs["member"] for r in resources if is_iam_type(r.type)]
    # Applied, every grant names its member, and the policy had them all to compare.
    assert preview or (len(members) >= 5 and all(m.startswith("serviceAccount:") for m in members))
    assert found(as_engine_sends) == []


def test_a_bucket_grant_to_the_previewer_is_refused(dev: list[MockedResource]) -> None:
    reported = found([*dev, bucket_grant(dev, "roles/storage.admin", PREVIEWER)])
    assert len(reported) == 1
    assert f"'extra-bucket-grant': roles/storage.admin is granted to '{PREVIEWER}'" in reported[0]
    assert "does not create" in reported[0] and "OUTSIDE_ACCOUNT_GRANTS" in reported[0]


def test_a_token_creator_grant_to_the_previewer_is_refused(dev: list[MockedResource]) -> None:
    """Minting the runtime account's tokens would give a pull request everything it may do."""
    reported = found([*dev, token_creator_grant(dev, PREVIEWER)])
    assert len(reported) == 1
    assert f"'extra-token-creator': {TOKEN_CREATOR} is granted to '{PREVIEWER}'" in reported[0]


def test_whatever_the_outside_account_is_called(dev: list[MockedResource]) -> None:
    """No naming convention is relied on: a renamed previewer, the deployer, another stack's
    account are all outside accounts."""
    for email in (
        "gh-preview@acme-ci.iam.gserviceaccount.com",
        f"ci-deployer@{PROJECT}.iam.gserviceaccount.com",
    ):
        member = f"serviceAccount:{email}"
        assert len(found([*dev, bucket_grant(dev, "roles/storage.objectViewer", member)])) == 1, email


def test_a_grant_to_one_of_the_stacks_own_accounts_passes(dev: list[MockedResource]) -> None:
    runtime = f"serviceAccount:{runtime_account(dev).outputs['email']}"
    assert found([*dev, bucket_grant(dev, "roles/storage.objectViewer", runtime)]) == []


def test_a_first_preview_still_knows_the_stacks_accounts_by_their_ids(dev: list[MockedResource]) -> None:
    """A pull request that adds the grant to a fresh stack: the accounts' emails are unknown,
    their ids and project are not, so the previewer is still told apart from them."""
    in_preview = [
        MockedResource(r.type, r.name, r.urn, r.inputs, r.outputs | {"email": UNKNOWN_STRING})
        if r.type == ACCOUNT
        else r
        for r in dev
    ]
    runtime_email = runtime_account(dev).outputs["email"]
    assert (
        found(
            [*in_preview, bucket_grant(dev, "roles/storage.objectViewer", f"serviceAccount:{runtime_email}")]
        )
        == []
    )
    assert len(found([*in_preview, token_creator_grant(dev, PREVIEWER)])) == 1


def test_an_account_that_cannot_be_told_yet_skips_the_check(dev: list[MockedResource]) -> None:
    """Unknown values are skipped, never reported: the update checks them."""
    unknown_id = [
        MockedResource(
            r.type,
            r.name,
            r.urn,
            r.inputs,
            r.outputs | {"email": UNKNOWN_STRING, "accountId": UNKNOWN_STRING},
        )
        if r.type == ACCOUNT
        else r
        for r in dev
    ]
    assert found([*unknown_id, token_creator_grant(dev, PREVIEWER)]) == []


def test_an_allow_listed_outside_account_may_hold_its_listed_roles_only(
    dev: list[MockedResource], monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = outside.OutsideGrant(
        re.compile(r"service-\d+@gcp-sa-pubsub\.iam\.gserviceaccount\.com"),
        frozenset({TOKEN_CREATOR}),
        "Pub/Sub signs push requests as the invoker",
    )
    assert found([*dev, token_creator_grant(dev, PUBSUB_AGENT)]) != []
    monkeypatch.setattr(outside, "OUTSIDE_ACCOUNT_GRANTS", (agent,))
    assert found([*dev, token_creator_grant(dev, PUBSUB_AGENT)]) == []
    other_role = found([*dev, bucket_grant(dev, "roles/storage.admin", PUBSUB_AGENT)])
    assert len(other_role) == 1 and "roles/storage.admin" in other_role[0]
    assert len(found([*dev, token_creator_grant(dev, PREVIEWER)])) == 1
