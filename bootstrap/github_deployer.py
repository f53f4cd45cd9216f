"""The identities GitHub Actions runs as: a deployer only the default branch's deployment jobs
may use, a read-only previewer for pull requests, and no key anywhere.

A workflow presents GitHub's OIDC token to Google's Security Token Service. The pool's
provider admits it only for the fork's repository, and then only from the default branch or
from a pull request job (bootstrap/settings.py). Which account the resulting principal may
impersonate depends on its subject: a deployment environment's jobs the deployer, pull
request jobs the previewer, nothing else either (policy/scheduler_guardrails/rules/config/github_oidc.py).
"""

from __future__ import annotations

import functools

import pulumi
import pulumi_gcp as gcp

from bootstrap.settings import GITHUB_OIDC_ISSUER, BootstrapSettings
from policy.scheduler_guardrails.rules.config.deployer_roles import (
    PREVIEWER_ROLES,
    PROJECT_SCOPE,
    SECRETS_KEY_SCOPE,
    STATE_BUCKET_SCOPE,
    deployer_roles,
)
from policy.scheduler_guardrails.rules.config.github_oidc import (
    WORKLOAD_IDENTITY_USER,
    environment_subject,
    pull_request_subject,
    subject_principal,
)
from policy.scheduler_guardrails.rules.config.grants import DEPLOYER_SECRETS_KEY

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

# What the provider copies from GitHub's token. google.subject (the `sub` claim) is what the
# impersonation grants name; the attributes show in audit logs and serve a fork's own rules.
ATTRIBUTE_MAPPING = {
    "google.subject": "assertion.sub",
    "attribute.repository": "assertion.repository",
    "attribute.repository_id": "assertion.repository_id",
    "attribute.repository_owner": "assertion.repository_owner",
    "attribute.ref": "assertion.ref",
    "attribute.workflow_ref": "assertion.job_workflow_ref",
}
KEY_ROTATION_PERIOD = f"{90 * 24 * 3600}s"


def _grant_name(prefix: str, role: str) -> str:
    return f"{prefix}-{role.removeprefix('roles/').replace('.', '-')}"


class GithubDeployer(pulumi.ComponentResource):
    """Pool and provider, the deployer and the previewer with their grants, optional state."""

    workload_identity_provider: pulumi.Output[str]
    deployer_email: pulumi.Output[str]
    previewer_email: pulumi.Output[str]
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
        previewer = self._previewer_account(name, apis)
        self._allow_impersonation(name, pool, deployer, previewer)
        self.workload_identity_provider = provider.name
        self.deployer_email = deployer.email
        self.previewer_email = previewer.email
        self.state_bucket_url = self._state_bucket(name, apis, previewer)
        self.secrets_provider = self._secrets_key(name, apis, deployer, previewer)
        self.register_outputs(
            {
                "workloadIdentityProvider": self.workload_identity_provider,
                "deployerServiceAccount": self.deployer_email,
                "previewerServiceAccount": self.previewer_email,
                "stateBucketUrl": self.state_bucket_url,
                "secretsProvider": self.secrets_provider,
            }
        )

    def _child(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self)

    def _kept(self, *after: pulumi.Resource) -> pulumi.ResourceOptions:
        """For what a `pulumi destroy` must not delete, or cannot: a deleted pool or provider
        keeps its id reserved for 30 days, a key ring and its keys are never deleted, the
        state bucket holds every stack's state. Each would make the next `pulumi up` fail
        with 409 (already exists) or lose data. `pulumi destroy` stops at them (protect); once
        unprotected, it leaves them in place (retain), for the next `pulumi up` to import as
        they are (docs/ci.md)."""
        return pulumi.ResourceOptions(
            parent=self, depends_on=list(after), protect=True, retain_on_delete=True
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
                opts=self._child(),
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
            opts=self._kept(*apis.values()),
        )
        provider = gcp.iam.WorkloadIdentityPoolProvider(
            f"{name}-provider",
            project=s.project,
            workload_identity_pool_id=pool.workload_identity_pool_id,
            workload_identity_pool_provider_id=s.provider_id,
            display_name="GitHub OIDC",
            description=f"{s.repository}: its {s.default_branch} branch and its pull requests only",
            attribute_mapping=ATTRIBUTE_MAPPING,
            # Without a condition, any repository on GitHub could exchange its tokens here.
            attribute_condition=s.attribute_condition,
            oidc=gcp.iam.WorkloadIdentityPoolProviderOidcArgs(issuer_uri=GITHUB_OIDC_ISSUER),
            opts=self._kept(),
        )
        return pool, provider

    def _account(
        self, name: str, account_id: str, title: str, description: str, apis: dict[str, gcp.projects.Service]
    ) -> gcp.serviceaccount.Account:
        return gcp.serviceaccount.Account(
            name,
            project=self._settings.project,
            account_id=account_id,
            display_name=title,
            description=description,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(apis.values())),
        )

    def _deployer_account(
        self, name: str, apis: dict[str, gcp.projects.Service]
    ) -> gcp.serviceaccount.Account:
        s = self._settings
        deployer = self._account(
            f"{name}-deployer",
            s.deployer_account_id,
            "CI deployer",
            f"Runs pulumi up from {s.repository}'s deployment environments on {s.default_branch}",
            apis,
        )
        # Exactly the roles the deploy docs list (and those of `jobGrants`), one project-level
        # member per role; never a primitive role, never an authoritative binding that would
        # drop other principals.
        for deployer_role in deployer_roles(s.job_grants):
            gcp.projects.IAMMember(
                _grant_name(f"{name}-deployer", deployer_role.role),
                project=s.project,
                role=deployer_role.role,
                member=deployer.member,
                opts=self._child(),
            )
        return deployer

    def _previewer_account(
        self, name: str, apis: dict[str, gcp.projects.Service]
    ) -> gcp.serviceaccount.Account:
        s = self._settings
        previewer = self._account(
            f"{name}-previewer",
            s.previewer_account_id,
            "CI previewer (read-only)",
            f"Runs pulumi preview for pull requests of {s.repository}; holds no role that writes",
            apis,
        )
        for previewer_role in PREVIEWER_ROLES:
            if previewer_role.scope == PROJECT_SCOPE:
                gcp.projects.IAMMember(
                    _grant_name(f"{name}-previewer", previewer_role.role),
                    project=s.project,
                    role=previewer_role.role,
                    member=previewer.member,
                    opts=self._child(),
                )
        return previewer

    def _allow_impersonation(
        self,
        name: str,
        pool: gcp.iam.WorkloadIdentityPool,
        deployer: gcp.serviceaccount.Account,
        previewer: gcp.serviceaccount.Account,
    ) -> None:
        """The deployer for each deployment environment's jobs, the previewer for pull request
        jobs: one principal (one `sub`) per grant, never a whole repository or pool."""
        s = self._settings
        subjects = {
            f"{name}-deployer-{environment}": (deployer, environment_subject(s.repository, environment))
            for environment in s.deploy_environments
        }
        subjects[f"{name}-previewer-pull-requests"] = (previewer, pull_request_subject(s.repository))
        for grant, (account, subject) in subjects.items():
            gcp.serviceaccount.IAMMember(
                f"{grant}-workload-identity-user",
                service_account_id=account.name,
                role=WORKLOAD_IDENTITY_USER,
                member=pool.name.apply(functools.partial(subject_principal, subject=subject)),
                opts=self._child(),
            )

    def _state_bucket(
        self, name: str, apis: dict[str, gcp.projects.Service], previewer: gcp.serviceaccount.Account
    ) -> pulumi.Output[str] | None:
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
            opts=self._kept(apis[STATE_BUCKET_API]),
        )
        for previewer_role in PREVIEWER_ROLES:
            if previewer_role.scope == STATE_BUCKET_SCOPE:
                gcp.storage.BucketIAMMember(
                    _grant_name(f"{name}-state-previewer", previewer_role.role),
                    bucket=bucket.name,
                    role=previewer_role.role,
                    member=previewer.member,
                    opts=self._child(),
                )
        return bucket.url

    def _secrets_key(
        self,
        name: str,
        apis: dict[str, gcp.projects.Service],
        deployer: gcp.serviceaccount.Account,
        previewer: gcp.serviceaccount.Account,
    ) -> pulumi.Output[str] | None:
        s = self._settings
        if s.secrets_key_ring is None:
            return None
        key_ring = gcp.kms.KeyRing(
            f"{name}-secrets",
            project=s.project,
            name=s.secrets_key_ring,
            location=s.secrets_key_location,
            # Cloud KMS never deletes a key ring: a destroy that went ahead would leave it in
            # Google Cloud anyway, and the next `pulumi up` would fail to create it again.
            opts=self._kept(apis[SECRETS_KEY_API]),
        )
        key = gcp.kms.CryptoKey(
            f"{name}-secrets-key",
            name="pulumi-secrets",
            key_ring=key_ring.id,
            purpose="ENCRYPT_DECRYPT",
            # New key versions every 90 days; old ones still decrypt what they encrypted.
            rotation_period=KEY_ROTATION_PERIOD,
            # Nor a key: the provider's delete destroys its versions, and every stack's secrets.
            opts=self._kept(),
        )
        grants = {"deployer": (deployer, DEPLOYER_SECRETS_KEY.role)}
        for previewer_role in PREVIEWER_ROLES:
            if previewer_role.scope == SECRETS_KEY_SCOPE:
                grants["previewer"] = (previewer, previewer_role.role)
        for holder, (account, role) in grants.items():
            gcp.kms.CryptoKeyIAMMember(
                f"{name}-secrets-key-{holder}",
                crypto_key_id=key.id,
                role=role,
                member=account.member,
                opts=self._child(),
            )
        return key.id.apply(lambda key_id: f"gcpkms://{key_id}")
