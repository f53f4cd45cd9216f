"""Run the bootstrap program under the stack harness's mocks, in applied or preview mode.

Reuses tools/mocked_program.py (its Google Cloud mocks, recording monitor and
MockedResource) and adds only what the bootstrap's resource types compute: the pool's and the
provider's full names (which carry the project *number*) and KMS ids.
"""

from __future__ import annotations

from typing import Any

import pulumi

from bootstrap.github_deployer import GithubDeployer
from bootstrap.settings import BootstrapSettings
from tools.mocked_program import GcpMocks, MockedResource, MockedStack, run_under_mocks

PROJECT_NUMBER = "123456789012"
BOOTSTRAP_PROJECT = "exactly-once-scheduler-bootstrap"
COMPONENT_NAME = "ci"
POOLS = f"projects/{PROJECT_NUMBER}/locations/global/workloadIdentityPools"


class _BootstrapMocks(GcpMocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        resource_id, outputs = super().new_resource(args)
        if self.preview:
            # Names Google computes (they carry the project number), ids: unknown until created.
            return resource_id, outputs
        inputs = args.inputs
        if args.typ == "gcp:iam/workloadIdentityPool:WorkloadIdentityPool":
            outputs["name"] = f"{POOLS}/{inputs['workloadIdentityPoolId']}"
        elif args.typ == "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider":
            pool, provider = inputs["workloadIdentityPoolId"], inputs["workloadIdentityPoolProviderId"]
            outputs["name"] = f"{POOLS}/{pool}/providers/{provider}"
        elif args.typ == "gcp:kms/keyRing:KeyRing":
            resource_id = (
                f"projects/{inputs['project']}/locations/{inputs['location']}/keyRings/{inputs['name']}"
            )
        elif args.typ == "gcp:kms/cryptoKey:CryptoKey":
            resource_id = f"{inputs['keyRing']}/cryptoKeys/{inputs['name']}"
        # The base class recorded its own outputs dict, which these updates changed in place.
        return resource_id, outputs


def run_bootstrap(
    settings: BootstrapSettings, preview: bool = False
) -> tuple[list[MockedResource], dict[str, Any]]:
    """Every resource GithubDeployer registers, and the component's outputs (None in preview
    where Google computes them)."""
    stack, outputs = bootstrap_stack(settings, preview)
    return stack.resources, outputs


def bootstrap_stack(settings: BootstrapSettings, preview: bool = False) -> tuple[MockedStack, dict[str, Any]]:
    """The bootstrap as a MockedStack (resources, options, dependency graph) and its outputs."""
    outputs: dict[str, Any] = {}

    def program() -> pulumi.Output[Any]:
        deployer = GithubDeployer(COMPONENT_NAME, settings)
        optional = {"stateBucketUrl": deployer.state_bucket_url, "secretsProvider": deployer.secrets_provider}
        wanted = {
            "workloadIdentityProvider": deployer.workload_identity_provider,
            "deployerServiceAccount": deployer.deployer_email,
            "previewerServiceAccount": deployer.previewer_email,
            **{key: value for key, value in optional.items() if value is not None},
        }
        return pulumi.Output.all(**wanted).apply(outputs.update)

    mocks = _BootstrapMocks(settings.project, preview=preview)
    resources, monitor, _ = run_under_mocks(
        program, mocks, project=BOOTSTRAP_PROJECT, stack="ci", preview=preview
    )
    return MockedStack(resources, {}, dependencies=monitor.dependencies), outputs
