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
from bootstrap.github_deployer import ATTRIBUTE_MAPPING
from bootstrap.settings import GITHUB_OIDC_ISSUER, BootstrapConfigError, BootstrapSettings
from policy.scheduler_guardrails.rules.config.deployer_roles import DEPLOYER_ROLES, PREVIEWER_ROLES
from policy.scheduler_guardrails.rules.config.github_oidc import WORKLOAD_IDENTITY_USER
from tests.bootstrap.github_tokens import admitted, run
from tests.bootstrap.mocked_bootstrap import BOOTSTRAP_PROJECT, POOLS, bootstrap_stack, run_bootstrap
from tools.mocked_program import MockedResource

BOOTSTRAP_DIR = Path(__file__).resolve().parents[2] / "bootstrap"
REPO = "acme/exactly-once-scheduler"
DEPLOYER = "serviceAccount:ci-deployer@acme-prod.iam.gserviceaccount.com"
PREVIEWER = "serviceAccount:ci-previewer@acme-prod.iam.gserviceaccount.com"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"


def settings(**overrides: object) -> BootstrapSettings:
    return BootstrapSettings.from_config({"repository": REPO, **overrides}, project="acme-prod")


def of_type(resources: list[MockedResource], type_: str) -> list[MockedResource]:
    return [r for r in resources if r.type == type_]


def provider_of(resources: list[MockedResource]) -> MockedResource:
    [provider] = of_type(resources, "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider")
    return provider


def impersonators(resources: list[MockedResource]) -> dict[str, set[str]]:
    """Account email -> the principals that may impersonate it."""
    found: dict[str, set[str]] = {}
    for binding in of_type(resources, ACCOUNT_MEMBER):
        assert binding.inputs["role"] == WORKLOAD_IDENTITY_USER
        email = binding.inputs["serviceAccountId"].rsplit("/", 1)[-1]
        found.setdefault(email, set()).add(binding.inputs["member"])
    return found


def subject(text: str) -> str:
    return f"principal://iam.googleapis.com/{POOLS}/github-actions/subject/{text}"


def test_the_provider_accepts_github_tokens_of_the_fork_only() -> None:
    resources, _ = run_bootstrap(settings())
    provider = provider_of(resources)
    assert provider.inputs["oidc"] == {"issuerUri": GITHUB_OIDC_ISSUER}
    assert provider.inputs["attributeCondition"].startswith(f'assertion.repository == "{REPO}" && ')
    mapping = provider.inputs["attributeMapping"]
    assert mapping["google.subject"] == "assertion.sub"
    assert mapping["attribute.repository"] == "assertion.repository"
    # The condition may only read attributes the mapping or GitHub's token provides.
    assert mapping == ATTRIBUTE_MAPPING


def test_a_repository_id_pins_the_condition_to_that_repository() -> None:
    condition = provider_of(run_bootstrap(settings(repositoryId="987654321"))[0]).inputs["attributeCondition"]
    assert condition.startswith(
        f'assertion.repository == "{REPO}" && assertion.repository_id == "987654321" && '
    )
    main_push = {"repository": REPO, "repository_id": "987654321", "ref": "refs/heads/main", "sub": "x"}
    assert admitted(condition, main_push)
    assert not admitted(condition, main_push | {"repository_id": "1"})


# What each kind of run may do: exchange its token at all, and then impersonate which account.
RUNS = {
    "deploy.yml's dev job on main": (
        run(REPO, ref="refs/heads/main", environment="dev", event="push"),
        "deployer",
    ),
    "deploy.yml's prod job on main": (
        run(REPO, ref="refs/heads/main", environment="prod", event="push"),
        "deployer",
    ),
    "preview.yml on a pull request": (
        run(REPO, ref="refs/pull/7/merge", event="pull_request"),
        "previewer",
    ),
    "a push to main without an environment": (run(REPO, ref="refs/heads/main", event="push"), None),
    "a branch's job naming prod": (
        run(REPO, ref="refs/heads/evil", environment="prod", event="push"),
        "refused",
    ),
    "a pull request's job naming prod": (
        run(REPO, ref="refs/pull/7/merge", environment="prod", event="pull_request"),
        "refused",
    ),
    "a dispatch on a branch naming dev": (
        run(REPO, ref="refs/heads/evil", environment="dev", event="workflow_dispatch"),
        "refused",
    ),
    "a branch push": (run(REPO, ref="refs/heads/evil", event="push"), "refused"),
    "a tag naming prod": (run(REPO, ref="refs/tags/v1", environment="prod", event="push"), "refused"),
    "another repository's main": (
        run("acme/other", ref="refs/heads/main", environment="prod", event="push"),
        "refused",
    ),
}


@pytest.mark.parametrize("kind", list(RUNS))
def test_only_the_default_branchs_environment_jobs_may_deploy_and_pull_requests_only_preview(
    kind: str,
) -> None:
    """The deployer for deployment jobs on main; the previewer for pull requests; a branch,
    however its workflow is written, gets neither."""
    resources, outputs = run_bootstrap(settings())
    token, expected = RUNS[kind]
    exchanged = admitted(provider_of(resources).inputs["attributeCondition"], token.claims)
    principal = subject(token.claims["sub"])
    may_impersonate = {email for email, members in impersonators(resources).items() if principal in members}
    accounts = {
        "deployer": outputs["deployerServiceAccount"],
        "previewer": outputs["previewerServiceAccount"],
    }
    if expected == "refused":
        assert not exchanged
    else:
        assert exchanged
        assert may_impersonate == ({accounts[expected]} if expected else set())


def test_each_account_names_its_principals_one_subject_at_a_time() -> None:
    resources, outputs = run_bootstrap(settings(deployEnvironments=["staging", "production"]))
    assert impersonators(resources) == {
        outputs["deployerServiceAccount"]: {
            subject(f"repo:{REPO}:environment:staging"),
            subject(f"repo:{REPO}:environment:production"),
        },
        outputs["previewerServiceAccount"]: {subject(f"repo:{REPO}:pull_request")},
    }


def test_another_default_branch_moves_the_deployers_trust_with_it() -> None:
    condition = provider_of(run_bootstrap(settings(defaultBranch="trunk"))[0]).inputs["attributeCondition"]
    on = dict(RUNS["deploy.yml's prod job on main"][0].claims)
    assert not admitted(condition, on)
    assert admitted(condition, on | {"ref": "refs/heads/trunk"})


def test_the_deployer_holds_exactly_the_listed_roles_and_the_previewer_only_read_roles() -> None:
    resources, outputs = run_bootstrap(settings(stateBucket="acme-pulumi-state", secretsKeyRing="pulumi"))
    by_member: dict[str, set[str]] = {}
    for grant in resources:
        if grant.type.endswith(
            ("iAMMember:IAMMember", "IAMMember:BucketIAMMember", "IAMMember:CryptoKeyIAMMember")
        ):
            by_member.setdefault(grant.inputs["member"], set()).add(grant.inputs["role"])
    deployer = f"serviceAccount:{outputs['deployerServiceAccount']}"
    previewer = f"serviceAccount:{outputs['previewerServiceAccount']}"
    assert by_member[deployer] == {r.role for r in DEPLOYER_ROLES} | {
        "roles/cloudkms.cryptoKeyEncrypterDecrypter"
    }
    assert by_member[previewer] == {r.role for r in PREVIEWER_ROLES}
    assert set(by_member) - {deployer, previewer} == {
        subject(f"repo:{REPO}:environment:dev"),
        subject(f"repo:{REPO}:environment:prod"),
        subject(f"repo:{REPO}:pull_request"),
    }
    # The previewer shares one role with the deployer: reading the project's metadata.
    assert by_member[previewer] & by_member[deployer] == {"roles/browser"}
    [bucket_grant] = of_type(resources, "gcp:storage/bucketIAMMember:BucketIAMMember")
    assert (bucket_grant.inputs["bucket"], bucket_grant.inputs["member"]) == ("acme-pulumi-state", previewer)
    grants = of_type(resources, PROJECT_MEMBER)
    assert {g.inputs["project"] for g in grants} == {"acme-prod"}
    assert not [r for r in resources if r.type.endswith(("iAMBinding:IAMBinding", "iAMPolicy:IAMPolicy"))]


KEPT = {"WorkloadIdentityPool", "WorkloadIdentityPoolProvider", "KeyRing", "CryptoKey", "Bucket"}


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_what_a_destroy_cannot_delete_is_protected_and_retained(preview: bool) -> None:
    """A deleted pool or provider id stays reserved for 30 days; Cloud KMS never deletes a key
    ring or a key (the provider's delete destroys the key's versions); the bucket holds the
    state. `pulumi destroy` must stop at each, and a destroy that goes ahead anyway leaves
    them for `pulumi import`. Nothing else is kept: accounts and grants are created anew."""
    stack, _ = bootstrap_stack(settings(stateBucket="acme-pulumi-state", secretsKeyRing="pulumi"), preview)
    options = {r.type.rsplit(":", 1)[-1]: (r.protect, r.retain_on_delete) for r in stack.resources}
    assert {kind: options[kind] for kind in KEPT} == dict.fromkeys(KEPT, (True, True))
    assert {kind for kind, kept in options.items() if any(kept)} == KEPT
    pool = stack.one("gcp:iam/workloadIdentityPool:WorkloadIdentityPool")
    provider = stack.one("gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider")
    assert pool.urn in stack.waits_for(provider.urn)
    key_ring, key = stack.one("gcp:kms/keyRing:KeyRing"), stack.one("gcp:kms/cryptoKey:CryptoKey")
    kms_api = stack.named("gcp:projects/service:Service", "ci-cloudkms")
    assert kms_api.urn in stack.waits_for(key_ring.urn) and key_ring.urn in stack.waits_for(key.urn)


def test_the_import_commands_name_the_kept_resources_as_the_program_does() -> None:
    """docs/ci.md's re-import path: one `pulumi import` per kept resource, with its type, its
    logical name and the id the program's settings give it."""
    page = (BOOTSTRAP_DIR.parent / "docs" / "ci.md").read_text(encoding="utf-8")
    resources, outputs = run_bootstrap(
        settings(stateBucket="my-gcp-project-pulumi-state", secretsKeyRing="pulumi")
    )
    kept = [r for r in resources if r.type.rsplit(":", 1)[-1] in KEPT]
    assert len(kept) == len(KEPT)
    pool = "projects/<gcp-project>/locations/global/workloadIdentityPools/github-actions"
    key_ring = "projects/<gcp-project>/locations/global/keyRings/pulumi"
    ids = {
        "WorkloadIdentityPool": pool,
        "WorkloadIdentityPoolProvider": f"{pool}/providers/github",
        "KeyRing": key_ring,
        "CryptoKey": f"{key_ring}/cryptoKeys/pulumi-secrets",
        "Bucket": "my-gcp-project-pulumi-state",
    }
    commands = " ".join(page.replace("\\\n", " ").split())
    for resource in kept:
        kind = resource.type.rsplit(":", 1)[-1]
        assert f"pulumi import {resource.type} {resource.name} {ids[kind]} --parent" in commands, kind
    assert outputs["secretsProvider"] == "gcpkms://" + ids["CryptoKey"].replace("<gcp-project>", "acme-prod")


def test_the_three_repository_variables_are_exported() -> None:
    _, outputs = run_bootstrap(settings())
    assert outputs == {
        "workloadIdentityProvider": f"{POOLS}/github-actions/providers/github",
        "deployerServiceAccount": DEPLOYER.removeprefix("serviceAccount:"),
        "previewerServiceAccount": "ci-previewer@acme-prod.iam.gserviceaccount.com",
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


def test_the_state_bucket_is_private_versioned_and_the_key_encrypts_for_the_deployer_only() -> None:
    resources, outputs = run_bootstrap(settings(stateBucket="acme-pulumi-state", secretsKeyRing="pulumi"))
    [bucket] = of_type(resources, "gcp:storage/bucket:Bucket")
    assert bucket.inputs["name"] == "acme-pulumi-state"
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["versioning"] == {"enabled": True}
    assert bucket.inputs["forceDestroy"] is False
    [key] = of_type(resources, "gcp:kms/cryptoKey:CryptoKey")
    assert key.inputs["rotationPeriod"] == "7776000s"
    key_grants = of_type(resources, "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember")
    assert {(g.inputs["member"], g.inputs["role"]) for g in key_grants} == {
        (DEPLOYER, "roles/cloudkms.cryptoKeyEncrypterDecrypter"),
        (PREVIEWER, "roles/cloudkms.cryptoKeyDecrypter"),
    }
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
        ({"repository": REPO, "previewerAccountId": "ci-deployer"}, "previewerAccountId"),
        ({"repository": REPO, "defaultBranch": 'main" || true || "'}, "defaultBranch"),
        ({"repository": REPO, "deployEnvironments": "prod"}, "deployEnvironments"),
        ({"repository": REPO, "deployEnvironments": []}, "deployEnvironments"),
        ({"repository": REPO, "deployEnvironments": ["prod", "my env"]}, "deployEnvironments"),
        ({"repository": REPO, "deployEnvironments": ["prod", "prod"]}, "deployEnvironments"),
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


def test_the_program_reads_its_projects_namespace_and_exports_the_three_variables(
    bootstrap_config: dict[str, str],
) -> None:
    # Lists arrive from the engine as JSON, as `pulumi config set --path` stores them.
    bootstrap_config[f"{BOOTSTRAP_PROJECT}:deployEnvironments"] = '["prod"]'
    runtime_config.set_all_config(bootstrap_config)
    exported: dict[str, object] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[object]:
        namespace = runpy.run_path(str(BOOTSTRAP_DIR / "__main__.py"))
        deployer = namespace["deployer"]
        assert namespace["settings_from_pulumi_config"]().deploy_environments == ("prod",)
        return pulumi.Output.all(
            deployer.workload_identity_provider, deployer.deployer_email, deployer.previewer_email
        ).apply(lambda values: exported.update(provider=values[0], deployer=values[1], previewer=values[2]))

    program()
    assert exported == {
        "provider": f"{POOLS}/github-actions/providers/github",
        "deployer": DEPLOYER.removeprefix("serviceAccount:"),
        "previewer": PREVIEWER.removeprefix("serviceAccount:"),
    }


def test_a_list_key_that_is_no_list_is_named(bootstrap_config: dict[str, str]) -> None:
    bootstrap_config[f"{BOOTSTRAP_PROJECT}:deployEnvironments"] = "prod"
    runtime_config.set_all_config(bootstrap_config)
    with pytest.raises(pulumi.RunError, match="invalid bootstrap config: deployEnvironments: "):
        runpy.run_path(str(BOOTSTRAP_DIR / "__main__.py"))


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
    assert built.state_bucket_location == "europe-west1"  # gcp:region, as the project file says
