"""The bootstrap stack under mocks: who may deploy, as whom, with which roles."""

from __future__ import annotations

import runpy
from collections.abc import Iterator
from pathlib import Path

import pulumi
import pytest
import yaml
from pulumi.runtime import config as runtime_config

from bootstrap.config import CONFIG_KEYS
from bootstrap.github_deployer import ATTRIBUTE_MAPPING, WORKLOAD_IDENTITY_USER
from bootstrap.settings import GITHUB_OIDC_ISSUER, BootstrapConfigError, BootstrapSettings
from infra.deployer_roles import DEPLOYER_ROLES
from tests.bootstrap.mocked_bootstrap import BOOTSTRAP_PROJECT, POOLS, run_bootstrap
from tests.support.pulumi_harness import MockedResource

BOOTSTRAP_DIR = Path(__file__).resolve().parents[2] / "bootstrap"
REPO = "acme/exactly-once-scheduler"
DEPLOYER = "serviceAccount:ci-deployer@acme-prod.iam.gserviceaccount.com"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"


def settings(**overrides: str) -> BootstrapSettings:
    return BootstrapSettings.from_config({"repository": REPO, **overrides}, project="acme-prod")


def of_type(resources: list[MockedResource], type_: str) -> list[MockedResource]:
    return [r for r in resources if r.type == type_]


def test_the_provider_accepts_github_tokens_of_the_fork_only() -> None:
    resources, _ = run_bootstrap(settings())
    [provider] = of_type(resources, "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider")
    assert provider.inputs["oidc"] == {"issuerUri": GITHUB_OIDC_ISSUER}
    assert provider.inputs["attributeCondition"] == f'assertion.repository == "{REPO}"'
    mapping = provider.inputs["attributeMapping"]
    assert mapping["google.subject"] == "assertion.sub"
    assert mapping["attribute.repository"] == "assertion.repository"
    # The condition may only read attributes the mapping or GitHub's token provides.
    assert mapping == ATTRIBUTE_MAPPING


def test_a_repository_id_pins_the_condition_to_that_repository() -> None:
    resources, _ = run_bootstrap(settings(repositoryId="987654321"))
    [provider] = of_type(resources, "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider")
    assert provider.inputs["attributeCondition"] == (
        f'assertion.repository == "{REPO}" && assertion.repository_id == "987654321"'
    )


def test_the_deployer_holds_exactly_the_listed_roles_and_nothing_else_is_granted_project_wide() -> None:
    resources, _ = run_bootstrap(settings())
    grants = of_type(resources, PROJECT_MEMBER)
    assert sorted(g.inputs["role"] for g in grants) == sorted(r.role for r in DEPLOYER_ROLES)
    assert {g.inputs["member"] for g in grants} == {DEPLOYER}
    assert {g.inputs["project"] for g in grants} == {"acme-prod"}
    assert not [r for r in resources if r.type.endswith(("iAMBinding:IAMBinding", "iAMPolicy:IAMPolicy"))]


def test_only_the_forks_workflows_may_impersonate_the_deployer() -> None:
    resources, outputs = run_bootstrap(settings())
    [binding] = of_type(resources, ACCOUNT_MEMBER)
    [account] = of_type(resources, "gcp:serviceaccount/account:Account")
    assert binding.inputs["role"] == WORKLOAD_IDENTITY_USER
    assert binding.inputs["serviceAccountId"] == account.outputs["name"]
    assert binding.inputs["member"] == (
        f"principalSet://iam.googleapis.com/{POOLS}/github-actions/attribute.repository/{REPO}"
    )
    # The two repository variables the workflows read.
    assert outputs == {
        "workloadIdentityProvider": f"{POOLS}/github-actions/providers/github",
        "deployerServiceAccount": DEPLOYER.removeprefix("serviceAccount:"),
    }


def test_federation_apis_are_enabled_and_stay_enabled_on_destroy() -> None:
    resources, _ = run_bootstrap(settings())
    services = {r.inputs["service"]: r.inputs for r in of_type(resources, "gcp:projects/service:Service")}
    assert {"iam.googleapis.com", "sts.googleapis.com", "iamcredentials.googleapis.com"} <= set(services)
    assert all(s["disableOnDestroy"] is False for s in services.values())
    assert "storage.googleapis.com" not in services and "cloudkms.googleapis.com" not in services


def test_no_state_bucket_or_key_unless_the_config_asks() -> None:
    resources, outputs = run_bootstrap(settings())
    assert not of_type(resources, "gcp:storage/bucket:Bucket")
    assert not [r for r in resources if r.type.startswith("gcp:kms/")]
    assert "stateBucketUrl" not in outputs and "secretsProvider" not in outputs


def test_the_state_bucket_is_private_versioned_and_the_key_is_the_deployers_only() -> None:
    resources, outputs = run_bootstrap(settings(stateBucket="acme-pulumi-state", secretsKeyRing="pulumi"))
    [bucket] = of_type(resources, "gcp:storage/bucket:Bucket")
    assert bucket.inputs["name"] == "acme-pulumi-state"
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["versioning"] == {"enabled": True}
    assert bucket.inputs["forceDestroy"] is False
    [key] = of_type(resources, "gcp:kms/cryptoKey:CryptoKey")
    assert key.inputs["rotationPeriod"] == "7776000s"
    [key_grant] = of_type(resources, "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember")
    assert (key_grant.inputs["role"], key_grant.inputs["member"]) == (
        "roles/cloudkms.cryptoKeyEncrypterDecrypter",
        DEPLOYER,
    )
    assert outputs["stateBucketUrl"] == "gs://acme-pulumi-state"
    assert outputs["secretsProvider"] == (
        "gcpkms://projects/acme-prod/locations/global/keyRings/pulumi/cryptoKeys/pulumi-secrets"
    )


def test_every_resource_is_a_child_of_the_component() -> None:
    resources, _ = run_bootstrap(settings(stateBucket="acme-pulumi-state", secretsKeyRing="pulumi"))
    [component] = [r for r in resources if not r.custom]
    assert all(r.parent == component.urn for r in resources if r is not component)


def test_a_first_preview_declares_the_same_resources() -> None:
    applied, _ = run_bootstrap(settings(stateBucket="acme-pulumi-state"))
    previewed, _ = run_bootstrap(settings(stateBucket="acme-pulumi-state"), preview=True)
    assert sorted(r.urn for r in previewed) == sorted(r.urn for r in applied)


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({}, "repository"),
        ({"repository": "exactly-once-scheduler"}, "repository"),
        ({"repository": 'acme/x" || true || "'}, "repository"),
        ({"repository": REPO, "repositoryId": "abc"}, "repositoryId"),
        ({"repository": REPO, "poolId": "gcp-github"}, "poolId"),
        ({"repository": REPO, "providerId": "GH"}, "providerId"),
        ({"repository": REPO, "deployerAccountId": "ci"}, "deployerAccountId"),
        ({"repository": REPO, "stateBucket": "Not_A-Bucket!"}, "stateBucket"),
        ({"repository": REPO, "secretsKeyRing": "a ring"}, "secretsKeyRing"),
        ({"repository": REPO, "stateBucketLocation": 3}, "stateBucketLocation"),
    ],
)
def test_bad_config_names_the_key(values: dict[str, object], key: str) -> None:
    with pytest.raises(BootstrapConfigError, match=rf"^{key} "):
        BootstrapSettings.from_config(values, project="acme-prod")


def test_a_missing_project_is_named() -> None:
    with pytest.raises(BootstrapConfigError, match="gcp:project"):
        BootstrapSettings.from_config({"repository": REPO}, project="")


def test_the_project_file_declares_exactly_the_keys_the_program_reads() -> None:
    project_file = yaml.safe_load((BOOTSTRAP_DIR / "Pulumi.yaml").read_text())
    assert set(project_file["config"]) == set(CONFIG_KEYS)
    example = yaml.safe_load((BOOTSTRAP_DIR / "Pulumi.ci.yaml").read_text())["config"]
    namespaced = {key.split(":", 1)[1] for key in example if key.startswith(f"{project_file['name']}:")}
    assert namespaced <= set(CONFIG_KEYS) and "repository" in namespaced


@pytest.fixture
def bootstrap_config() -> Iterator[dict[str, str]]:
    run_bootstrap(settings())  # configures the mocked runtime as the engine would
    yield {"gcp:project": "acme-prod", f"{BOOTSTRAP_PROJECT}:repository": REPO}
    runtime_config.set_all_config({})


def test_the_program_reads_its_projects_namespace_and_exports_the_two_variables(
    bootstrap_config: dict[str, str],
) -> None:
    runtime_config.set_all_config(bootstrap_config)
    exported: dict[str, object] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[object]:
        namespace = runpy.run_path(str(BOOTSTRAP_DIR / "__main__.py"))
        deployer = namespace["deployer"]
        return pulumi.Output.all(deployer.workload_identity_provider, deployer.deployer_email).apply(
            lambda values: exported.update(provider=values[0], email=values[1])
        )

    program()
    assert exported == {
        "provider": f"{POOLS}/github-actions/providers/github",
        "email": DEPLOYER.removeprefix("serviceAccount:"),
    }


def test_the_program_fails_cleanly_without_a_repository(bootstrap_config: dict[str, str]) -> None:
    del bootstrap_config[f"{BOOTSTRAP_PROJECT}:repository"]
    runtime_config.set_all_config(bootstrap_config)
    with pytest.raises(pulumi.RunError, match="invalid bootstrap config: repository is not set"):
        runpy.run_path(str(BOOTSTRAP_DIR / "__main__.py"))


def test_the_example_stack_file_builds_valid_settings() -> None:
    example = yaml.safe_load((BOOTSTRAP_DIR / "Pulumi.ci.yaml").read_text())["config"]
    values = {k.split(":", 1)[1]: v for k, v in example.items() if k.startswith(f"{BOOTSTRAP_PROJECT}:")}
    built = BootstrapSettings.from_config(
        values, project=example["gcp:project"], region=example["gcp:region"]
    )
    assert (built.project, built.repository) == ("my-gcp-project", "my-org/exactly-once-scheduler")
    assert built.state_bucket == "my-gcp-project-pulumi-state" and built.secrets_key_ring == "pulumi"
    assert built.state_bucket_location == "us-central1"  # gcp:region, as the project file says
