"""The identity GitHub Actions deploys as: trusted for one repository, holding only what a
deploy needs, and no key anywhere.

A workflow presents GitHub's OIDC token to Google's Security Token Service; the pool's
provider accepts it only when the attribute condition names the fork's repository, and the
resulting federated principal may impersonate the deployer account and nothing else.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from bootstrap.settings import GITHUB_OIDC_ISSUER, BootstrapSettings
from infra.deployer_roles import DEPLOYER_ROLES

COMPONENT_TYPE = "exactly-once-scheduler:bootstrap:GithubDeployer"

# Workload Identity Federation needs the IAM API (pools), STS (token exchange) and IAM
# Credentials (impersonation); Resource Manager serves the deployer's project IAM calls.
REQUIRED_APIS = (
    "iam.googleapis.com",
    "sts.googleapis.com",
    "iamcredentials.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)
STATE_BUCKET_API = "storage.googleapis.com"
SECRETS_KEY_API = "cloudkms.googleapis.com"

# What the provider copies from GitHub's token: google.subject names the principal in audit
# logs; attribute.repository is what the impersonation grant and the condition match on.
ATTRIBUTE_MAPPING = {
    "google.subject": "assertion.sub",
    "attribute.repository": "assertion.repository",
    "attribute.repository_id": "assertion.repository_id",
    "attribute.repository_owner": "assertion.repository_owner",
    "attribute.ref": "assertion.ref",
    "attribute.workflow_ref": "assertion.job_workflow_ref",
}
WORKLOAD_IDENTITY_USER = "roles/iam.workloadIdentityUser"
KEY_ENCRYPTER_DECRYPTER = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
KEY_ROTATION_PERIOD = f"{90 * 24 * 3600}s"


def repository_principal_set(pool_name: str, repository: str) -> str:
    """Every workflow run of `repository`, as an IAM principal (pool_name is the full name)."""
    return f"principalSet://iam.googleapis.com/{pool_name}/attribute.repository/{repository}"


class GithubDeployer(pulumi.ComponentResource):
    """Workload Identity pool and provider, the deployer account and its grants, optional state."""

    workload_identity_provider: pulumi.Output[str]
    deployer_email: pulumi.Output[str]
    state_bucket_url: pulumi.Output[str] | None
    secrets_provider: pulumi.Output[str] | None

    def __init__(
        self, name: str, settings: BootstrapSettings, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        self._settings = settings
        apis = self._enable_apis(name)
        pool, provider = self._trust_the_repository(name, apis)
        deployer = self._deployer_account(name, apis)
        self._allow_the_repository_to_impersonate(name, pool, deployer)
        self.workload_identity_provider = provider.name
        self.deployer_email = deployer.email
        self.state_bucket_url = self._state_bucket(name, apis)
        self.secrets_provider = self._secrets_key(name, apis, deployer)
        self.register_outputs(
            {
                "workloadIdentityProvider": self.workload_identity_provider,
                "deployerServiceAccount": self.deployer_email,
                "stateBucketUrl": self.state_bucket_url,
                "secretsProvider": self.secrets_provider,
            }
        )

    def _enable_apis(self, name: str) -> dict[str, gcp.projects.Service]:
        wanted = list(REQUIRED_APIS)
        if self._settings.state_bucket is not None:
            wanted.append(STATE_BUCKET_API)
        if self._settings.secrets_key_ring is not None:
            wanted.append(SECRETS_KEY_API)
        return {
            api: gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                project=self._settings.project,
                service=api,
                # The main stack and other tools use these APIs too: never turn them off.
                disable_on_destroy=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for api in wanted
        }

    def _trust_the_repository(
        self, name: str, apis: dict[str, gcp.projects.Service]
    ) -> tuple[gcp.iam.WorkloadIdentityPool, gcp.iam.WorkloadIdentityPoolProvider]:
        s = self._settings
        pool = gcp.iam.WorkloadIdentityPool(
            f"{name}-pool",
            project=s.project,
            workload_identity_pool_id=s.pool_id,
            display_name="GitHub Actions",
            description=f"GitHub Actions workflows of {s.repository}",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(apis.values())),
        )
        provider = gcp.iam.WorkloadIdentityPoolProvider(
            f"{name}-provider",
            project=s.project,
            workload_identity_pool_id=pool.workload_identity_pool_id,
            workload_identity_pool_provider_id=s.provider_id,
            display_name="GitHub OIDC",
            description=f"Accepts GitHub's OIDC tokens of {s.repository} only",
            attribute_mapping=ATTRIBUTE_MAPPING,
            # Without a condition, any repository on GitHub could exchange its tokens here.
            attribute_condition=s.attribute_condition,
            oidc=gcp.iam.WorkloadIdentityPoolProviderOidcArgs(issuer_uri=GITHUB_OIDC_ISSUER),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return pool, provider

    def _deployer_account(
        self, name: str, apis: dict[str, gcp.projects.Service]
    ) -> gcp.serviceaccount.Account:
        s = self._settings
        deployer = gcp.serviceaccount.Account(
            f"{name}-deployer",
            project=s.project,
            account_id=s.deployer_account_id,
            display_name="CI deployer",
            description=f"Runs pulumi preview/up from the GitHub Actions of {s.repository}",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(apis.values())),
        )
        # Exactly the roles the deploy docs list, one project-level member per role; never a
        # primitive role, never an authoritative binding that would drop other principals.
        for deployer_role in DEPLOYER_ROLES:
            gcp.projects.IAMMember(
                f"{name}-deployer-{deployer_role.role.removeprefix('roles/').replace('.', '-')}",
                project=s.project,
                role=deployer_role.role,
                member=deployer.member,
                opts=pulumi.ResourceOptions(parent=self),
            )
        return deployer

    def _allow_the_repository_to_impersonate(
        self, name: str, pool: gcp.iam.WorkloadIdentityPool, deployer: gcp.serviceaccount.Account
    ) -> None:
        repository = self._settings.repository
        gcp.serviceaccount.IAMMember(
            f"{name}-deployer-workload-identity-user",
            service_account_id=deployer.name,
            role=WORKLOAD_IDENTITY_USER,
            member=pool.name.apply(lambda pool_name: repository_principal_set(pool_name, repository)),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _state_bucket(self, name: str, apis: dict[str, gcp.projects.Service]) -> pulumi.Output[str] | None:
        s = self._settings
        if s.state_bucket is None:
            return None
        # The deployer reads and writes it through roles/storage.admin, which it holds anyway.
        bucket = gcp.storage.Bucket(
            f"{name}-state",
            project=s.project,
            name=s.state_bucket,
            location=s.state_bucket_location,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            # Every state checkpoint stays recoverable after a bad update.
            versioning=gcp.storage.BucketVersioningArgs(enabled=True),
            force_destroy=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[apis[STATE_BUCKET_API]], protect=True),
        )
        return bucket.url

    def _secrets_key(
        self, name: str, apis: dict[str, gcp.projects.Service], deployer: gcp.serviceaccount.Account
    ) -> pulumi.Output[str] | None:
        s = self._settings
        if s.secrets_key_ring is None:
            return None
        key_ring = gcp.kms.KeyRing(
            f"{name}-secrets",
            project=s.project,
            name=s.secrets_key_ring,
            location=s.secrets_key_location,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[apis[SECRETS_KEY_API]]),
        )
        key = gcp.kms.CryptoKey(
            f"{name}-secrets-key",
            name="pulumi-secrets",
            key_ring=key_ring.id,
            purpose="ENCRYPT_DECRYPT",
            # New key versions every 90 days; old ones still decrypt what they encrypted.
            rotation_period=KEY_ROTATION_PERIOD,
            # Destroying the key would make every stack's secrets unreadable.
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        gcp.kms.CryptoKeyIAMMember(
            f"{name}-secrets-key-deployer",
            crypto_key_id=key.id,
            role=KEY_ENCRYPTER_DECRYPTER,
            member=deployer.member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        return key.id.apply(lambda key_id: f"gcpkms://{key_id}")
