"""The bootstrap stack against the guardrail pack, applied and in a first preview."""

from __future__ import annotations

import pytest

from bootstrap.settings import BootstrapSettings
from policy.scheduler_guardrails.identities.ci import READ_ONLY_ROLES
from policy.scheduler_guardrails.rules.config.deployer_roles import DEPLOYER_ROLES
from tests.bootstrap.mocked_bootstrap import run_bootstrap
from tests.bootstrap.policy_run import violations
from tests.support.stacks import dev_stack_resources
from tools.mocked_program import MockedResource

FULL = BootstrapSettings(
    project="acme-prod", repository="acme/eos", state_bucket="acme-pulumi-state", secrets_key_ring="pulumi"
)
DEPLOYER_GRANT_NAMES = {
    f"ci-deployer-{role.role.removeprefix('roles/').replace('.', '-')}" for role in DEPLOYER_ROLES
}


@pytest.fixture(scope="module")
def resources() -> list[MockedResource]:
    return run_bootstrap(FULL)[0]


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_only_the_deployers_project_role_grants_are_questioned(
    resources: list[MockedResource], preview: bool
) -> None:
    """Everything else in the bootstrap passes every policy: the pool, the impersonation grant,
    the bucket, the key. The deployer's project-wide roles are what the allowance is for."""
    found = violations(resources, preview)
    others = [
        v for v in found if not any(v.startswith(f"project-iam-allowlist {n}:") for n in DEPLOYER_GRANT_NAMES)
    ]
    assert others == []


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_the_bootstrap_passes_every_policy(resources: list[MockedResource], preview: bool) -> None:
    assert violations(resources, preview) == []


def test_a_public_state_bucket_is_caught(resources: list[MockedResource]) -> None:
    """Guards the tests above against passing because nothing was checked."""
    broken = []
    for r in resources:
        if r.type == "gcp:storage/bucket:Bucket":
            inputs = r.inputs | {"publicAccessPrevention": "inherited"}
            r = MockedResource(r.type, r.name, r.urn, inputs, r.outputs, r.parent, r.custom)
        broken.append(r)
    assert any(v.startswith("source-bucket-private ci-state:") for v in violations(broken))


def test_a_primitive_role_for_the_deployer_is_caught(resources: list[MockedResource]) -> None:
    grant = next(r for r in resources if r.name == "ci-deployer-browser")
    editor = MockedResource(
        grant.type,
        "ci-deployer-editor",
        grant.urn + "-editor",
        grant.inputs | {"role": "roles/editor"},
        grant.outputs,
    )
    assert any(
        v.startswith("no-primitive-roles ci-deployer-editor:") for v in violations([*resources, editor])
    )


def _questioned(found: list[str], grant_name: str) -> bool:
    return any(
        f"'{grant_name}'" in v and v.split()[0] in ("project-iam-allowlist", "project-role-holders:")
        for v in found
    )


def _bindings(resources: list[MockedResource]) -> list[MockedResource]:
    return [r for r in resources if r.type == "gcp:serviceaccount/iAMMember:IAMMember"]


def _with_member(binding: MockedResource, name: str, member: str) -> MockedResource:
    return MockedResource(
        binding.type,
        name,
        binding.urn + "-" + name,
        binding.inputs | {"member": member},
        binding.outputs | {"member": member},
    )


def _pool(member: str) -> str:
    return member.split("/subject/")[0]


@pytest.mark.parametrize(
    "broader",
    [
        "/*",
        f"/attribute.repository/{FULL.repository}",
        f"/subject/repo:{FULL.repository}:ref:refs/heads/main",
        f"/subject/repo:{FULL.repository}:pull_request",
    ],
    ids=["whole-pool", "whole-repository", "main-without-environment", "pull-requests"],
)
def test_a_deployer_more_than_deployment_jobs_may_impersonate_gets_no_project_roles(
    resources: list[MockedResource], broader: str
) -> None:
    """The allowance is for an account only deployment-environment jobs can use; one more
    impersonation grant, to anything broader, takes it away, and makes the account one that
    may hold only read roles."""
    deploy_binding = next(r for r in _bindings(resources) if "environment:prod" in r.inputs["member"])
    extra = _with_member(
        deploy_binding, "ci-deployer-broader", _pool(deploy_binding.inputs["member"]) + broader
    )
    found = violations([*resources, extra])
    assert all(_questioned(found, name) for name in DEPLOYER_GRANT_NAMES)
    writing = {v.split("': ")[1].split()[0] for v in found if v.startswith("ci-read-only-outside-deploys:")}
    held = {r.role for r in DEPLOYER_ROLES} | {"roles/cloudkms.cryptoKeyEncrypterDecrypter"}
    assert writing == held - READ_ONLY_ROLES and "roles/resourcemanager.projectIamAdmin" in writing


def test_the_pack_refuses_a_writing_role_for_the_previewer(resources: list[MockedResource]) -> None:
    """Wherever it is granted: on the project, on the state bucket, on the key, on another
    account (impersonating the deployer would be a way around all of it)."""
    previewer = "serviceAccount:ci-previewer@acme-prod.iam.gserviceaccount.com"
    templates = {r.type: r for r in resources}
    writes = {
        "gcp:projects/iAMMember:IAMMember": ("ci-previewer-run-admin", "roles/run.admin"),
        "gcp:storage/bucketIAMMember:BucketIAMMember": (
            "ci-state-previewer-admin",
            "roles/storage.objectAdmin",
        ),
        "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember": (
            "ci-key-previewer-encrypt",
            "roles/cloudkms.cryptoKeyEncrypter",
        ),
        "gcp:serviceaccount/iAMMember:IAMMember": (
            "ci-previewer-token-creator",
            "roles/iam.serviceAccountTokenCreator",
        ),
    }
    for resource_type, (name, role) in writes.items():
        template = templates[resource_type]
        grant = MockedResource(
            resource_type,
            name,
            f"{template.urn}-{name}",
            template.inputs | {"role": role, "member": previewer},
            template.outputs | {"role": role, "member": previewer},
        )
        found = [v for v in violations([*resources, grant]) if v.startswith("ci-read-only-outside-deploys:")]
        assert len(found) == 1 and f"'{name}': {role} is granted to '{previewer}'" in found[0], (name, found)
        assert "pull request jobs may impersonate" in found[0]


def test_the_previewer_may_hold_its_read_roles_and_the_deployer_everything_listed(
    resources: list[MockedResource],
) -> None:
    assert [v for v in violations(resources) if v.startswith("ci-read-only-outside-deploys:")] == []
    roles = {
        r.inputs["role"]
        for r in resources
        if r.inputs.get("member", "").startswith("serviceAccount:ci-previewer@")
    }
    assert roles == READ_ONLY_ROLES


def test_deployer_roles_stay_off_the_main_stacks_own_accounts() -> None:
    """Granting a deploy role to, say, the function's runtime account is still refused."""

    stack = dev_stack_resources()
    grant = next(r for r in stack if r.type == "gcp:projects/iAMMember:IAMMember")
    run_admin = MockedResource(
        grant.type,
        "runtime-run-admin",
        grant.urn + "-run-admin",
        {k: v for k, v in grant.inputs.items() if k != "condition"} | {"role": "roles/run.admin"},
        {k: v for k, v in grant.outputs.items() if k != "condition"} | {"role": "roles/run.admin"},
    )
    assert _questioned(violations([*stack, run_admin]), "runtime-run-admin")
