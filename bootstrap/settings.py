"""The bootstrap stack's config, validated before any resource is declared.

Kept free of the Pulumi engine so tests and the docs can build settings directly. Every error
names the config key and what is wrong with its value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from policy.scheduler_guardrails.rules.config.deployer_roles import GRANT_KIND_ROLES
from policy.scheduler_guardrails.rules.config.github_oidc import (
    GOOGLE_SUBJECT_MAX_LENGTH,
    environment_subject,
    pull_request_subject,
)

GITHUB_OIDC_ISSUER: Final = "https://token.actions.githubusercontent.com"

# Where a GitHub owner/repository name may not go: GitHub's own rules, which keep the value
# safe to quote inside the provider's CEL attribute condition.
_REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_REPOSITORY_ID = re.compile(r"^[0-9]{1,20}$")
# Workload Identity pool and provider ids: 4-32 characters, lower-case letters, digits and
# hyphens; the "gcp-" prefix is reserved by Google.
_POOL_OR_PROVIDER_ID = re.compile(r"^[a-z0-9-]{4,32}$")
# Service account ids: 6-30 characters, starting with a letter, no trailing hyphen.
_ACCOUNT_ID = re.compile(r"^[a-z](?:[-a-z0-9]{4,28})[a-z0-9]$")
# Bucket names: 3-63 characters of lower-case letters, digits, '-', '_' and '.'.
_BUCKET = re.compile(r"^[a-z0-9][-a-z0-9_.]{1,61}[a-z0-9]$")
_KEY_RING = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
# A branch name git accepts and that is safe to quote in CEL: no quotes, spaces or backslashes.
_BRANCH = re.compile(r"^[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$")
# GitHub environment names as they appear in a token's subject: kept to what needs no escaping.
_ENVIRONMENT = re.compile(r"^[A-Za-z0-9._-]{1,255}$")


class BootstrapConfigError(ValueError):
    """A config value the bootstrap stack cannot use; the message names the key."""


@dataclass(frozen=True)
class BootstrapSettings:
    """What the bootstrap stack creates, from `pulumi config` (see Pulumi.ci.yaml)."""

    project: str
    # The fork, as "<owner>/<repo>": the only repository whose workflows may deploy.
    repository: str
    # GitHub's numeric repository id: pins the trust to this repository even if the name is
    # later freed and taken by someone else. Optional because it must be looked up.
    repository_id: str | None = None
    pool_id: str = "github-actions"
    provider_id: str = "github"
    deployer_account_id: str = "ci-deployer"
    # Runs `pulumi preview` for pull requests: read-only (infra/deployer_roles.PREVIEWER_ROLES).
    previewer_account_id: str = "ci-previewer"
    # The only branch whose workflow runs may deploy: tokens of a deployment environment's jobs
    # are refused at the exchange unless they come from it.
    default_branch: str = "main"
    # The GitHub environments deploy.yml's jobs name: only their jobs may impersonate the
    # deployer.
    deploy_environments: tuple[str, ...] = ("dev", "prod")
    # A private bucket for Pulumi state (`pulumi login gs://<bucket>`), created only when named.
    state_bucket: str | None = None
    state_bucket_location: str = "US"
    # A KMS key ring for the stacks' secrets provider (gcpkms://...), created only when named.
    # Cloud KMS never deletes a key ring or its keys: a `pulumi destroy` leaves both in place,
    # and bringing the bootstrap up again imports them (docs/ci.md).
    secrets_key_ring: str | None = None
    secrets_key_location: str = "global"
    # The kinds of resource the stacks' jobs grant the runtime account a role on whose IAM
    # policy no role of DEPLOYER_ROLES may set (`secret`: a job's `secrets` or a secret grant;
    # `topic`, `subscription`): the deployer gets GRANT_KIND_ROLES' role for each.
    job_grants: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, values: Mapping[str, Any], project: str, region: str = "") -> BootstrapSettings:
        """Settings from the stack's config values (keys as in Pulumi.<stack>.yaml, no namespace)."""
        if not project:
            raise BootstrapConfigError("gcp:project is not set: run `pulumi config set gcp:project <id>`")
        repository = _required_str(values, "repository")
        if not _REPOSITORY.match(repository):
            raise BootstrapConfigError(
                f"repository is '{repository}': expected '<owner>/<repo>' as GitHub writes it, "
                "e.g. 'acme/exactly-once-scheduler'"
            )
        deployer = _account_id(values, "deployerAccountId") or cls.deployer_account_id
        previewer = _account_id(values, "previewerAccountId") or cls.previewer_account_id
        if previewer == deployer:
            raise BootstrapConfigError(
                f"previewerAccountId is '{previewer}', the same as deployerAccountId: the read-only "
                "previewer must be an account of its own"
            )
        environments = _environments(values, "deployEnvironments") or cls.deploy_environments
        _check_subject_lengths(repository, environments)
        return cls(
            project=project,
            repository=repository,
            repository_id=_matching(values, "repositoryId", _REPOSITORY_ID, "GitHub's numeric repository id"),
            pool_id=_id(values, "poolId", cls.pool_id),
            provider_id=_id(values, "providerId", cls.provider_id),
            deployer_account_id=deployer,
            previewer_account_id=previewer,
            default_branch=_matching(values, "defaultBranch", _BRANCH, "a branch name, e.g. 'main'")
            or cls.default_branch,
            deploy_environments=environments,
            state_bucket=_matching(values, "stateBucket", _BUCKET, "a valid Cloud Storage bucket name"),
            state_bucket_location=_text(values, "stateBucketLocation") or region or cls.state_bucket_location,
            secrets_key_ring=_matching(values, "secretsKeyRing", _KEY_RING, "1-63 letters, digits, - or _"),
            secrets_key_location=_text(values, "secretsKeyLocation") or cls.secrets_key_location,
            job_grants=_job_grants(values, "jobGrants"),
        )

    @property
    def default_ref(self) -> str:
        return f"refs/heads/{self.default_branch}"

    @property
    def attribute_condition(self) -> str:
        """The provider's CEL condition, checked at every token exchange.

        Tokens of any other repository are refused. Of this repository's, only two kinds are
        admitted: those of runs on the default branch (deploy.yml's environment jobs among
        them), and those of pull request jobs that name no environment (preview.yml's). An
        environment's job on any other branch or pull request is refused here, whatever the
        environment's own branch rules say: GitHub creates an environment a workflow names
        without any rule."""
        condition = f'assertion.repository == "{self.repository}"'
        if self.repository_id is not None:
            condition += f' && assertion.repository_id == "{self.repository_id}"'
        pull_request = pull_request_subject(self.repository)
        return f'{condition} && (assertion.ref == "{self.default_ref}" || assertion.sub == "{pull_request}")'


def _required_str(values: Mapping[str, Any], key: str) -> str:
    value = values.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BootstrapConfigError(f"{key} is not set: run `pulumi config set {key} <value>`")
    return value.strip()


def _text(values: Mapping[str, Any], key: str) -> str | None:
    """The key's value; unset and "" (the project file's default) both mean "not set"."""
    value = values.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BootstrapConfigError(f"{key} is {value!r}: expected a string")
    return value


def _matching(values: Mapping[str, Any], key: str, pattern: re.Pattern[str], shape: str) -> str | None:
    value = _text(values, key)
    if value is not None and not pattern.match(value):
        raise BootstrapConfigError(f"{key} is '{value}': expected {shape}")
    return value


def _account_id(values: Mapping[str, Any], key: str) -> str | None:
    return _matching(values, key, _ACCOUNT_ID, "6-30 lower-case letters, digits or hyphens")


def _environments(values: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    value = values.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, list) or not value:
        raise BootstrapConfigError(f"{key} is {value!r}: expected a list of GitHub environment names")
    for name in value:
        if not isinstance(name, str) or not _ENVIRONMENT.match(name):
            raise BootstrapConfigError(
                f"{key} has {name!r}: expected 1-255 letters, digits, '.', '_' or '-' (the names "
                "deploy.yml's jobs give in `environment:`)"
            )
    if len(set(value)) != len(value):
        raise BootstrapConfigError(f"{key} is {value!r}: each environment once")
    return tuple(value)


def _check_subject_lengths(repository: str, environments: tuple[str, ...]) -> None:
    """Every subject the bootstrap binds fits Google's limit: GitHub writes the whole
    repository and environment name into it, and a longer one fails every token exchange.
    The previewer's `repo:<repository>:pull_request` is shorter than any environment's, so
    checking those checks it too."""
    for environment in environments:
        subject = environment_subject(repository, environment)
        if len(subject) > GOOGLE_SUBJECT_MAX_LENGTH:
            raise BootstrapConfigError(
                f"repository and deployEnvironments: the GitHub OIDC subject '{subject}' is {len(subject)} "
                f"characters, and Workload Identity Federation accepts at most {GOOGLE_SUBJECT_MAX_LENGTH}: "
                "every token exchange for it would fail. Use a shorter environment name (or repository name)."
            )


def _job_grants(values: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = values.get(key)
    if value is None or value == "" or value == []:
        return ()
    known = ", ".join(GRANT_KIND_ROLES)
    if not isinstance(value, list):
        raise BootstrapConfigError(f"{key} is {value!r}: expected a list of grant kinds ({known})")
    for kind in value:
        if kind not in GRANT_KIND_ROLES:
            raise BootstrapConfigError(
                f"{key} has {kind!r}: expected one of {known} (the other kinds a job may be granted on "
                "need no role beyond the deployer's own)"
            )
    if len(set(value)) != len(value):
        raise BootstrapConfigError(f"{key} is {value!r}: each kind once")
    return tuple(value)


def _id(values: Mapping[str, Any], key: str, default: str) -> str:
    value = _matching(values, key, _POOL_OR_PROVIDER_ID, "4-32 lower-case letters, digits or hyphens")
    if value is not None and value.startswith("gcp-"):
        raise BootstrapConfigError(f"{key} is '{value}': the 'gcp-' prefix is reserved by Google")
    return value or default
