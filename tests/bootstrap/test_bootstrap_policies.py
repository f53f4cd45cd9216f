"""The bootstrap stack against the guardrail pack, applied and in a first preview."""

from __future__ import annotations

import pytest

from bootstrap.settings import BootstrapSettings
from infra.deployer_roles import DEPLOYER_ROLES
from tests.bootstrap.mocked_bootstrap import run_bootstrap
from tests.bootstrap.policy_run import violations
from tests.support.pulumi_harness import MockedResource

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


def test_a_deployer_the_whole_pool_may_impersonate_gets_no_project_roles(
    resources: list[MockedResource],
) -> None:
    """The allowance is for an account only one repository can use; a second, broader
    impersonation grant (every identity in the pool) takes it away."""
    [binding] = [r for r in resources if r.type == "gcp:serviceaccount/iAMMember:IAMMember"]
    whole_pool = binding.inputs["member"].split("/attribute.repository/")[0] + "/*"
    broader = MockedResource(
        binding.type,
        "ci-deployer-whole-pool",
        binding.urn + "-whole-pool",
        binding.inputs | {"member": whole_pool},
        binding.outputs | {"member": whole_pool},
    )
    found = violations([*resources, broader])
    assert all(_questioned(found, name) for name in DEPLOYER_GRANT_NAMES)


def test_deployer_roles_stay_off_the_main_stacks_own_accounts() -> None:
    """Granting a deploy role to, say, the function's runtime account is still refused."""
    from tests.support import pulumi_harness as harness

    stack = harness.dev_stack_resources()
    grant = next(r for r in stack if r.type == "gcp:projects/iAMMember:IAMMember")
    run_admin = MockedResource(
        grant.type,
        "runtime-run-admin",
        grant.urn + "-run-admin",
        {k: v for k, v in grant.inputs.items() if k != "condition"} | {"role": "roles/run.admin"},
        {k: v for k, v in grant.outputs.items() if k != "condition"} | {"role": "roles/run.admin"},
    )
    assert _questioned(violations([*stack, run_admin]), "runtime-run-admin")
