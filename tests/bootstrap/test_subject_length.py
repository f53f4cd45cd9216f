"""Google's Workload Identity Federation takes a `google.subject` of at most 127 characters,
and GitHub writes the whole repository and environment name into the token's `sub`: the
bootstrap refuses a configuration whose subjects would not fit, naming the keys and the length,
instead of binding principals no token exchange can ever reach."""

from __future__ import annotations

import pytest

from bootstrap.settings import BootstrapConfigError, BootstrapSettings
from policy.scheduler_guardrails.rules.config.github_oidc import (
    GOOGLE_SUBJECT_MAX_LENGTH,
    environment_subject,
    pull_request_subject,
)

OWNER = "acme"
REPO = f"{OWNER}/exactly-once-scheduler"


def environment_of_subject_length(length: int, repository: str = REPO) -> str:
    """An environment name that makes `repo:<repository>:environment:<it>` `length` long."""
    name = "e" * (length - len(environment_subject(repository, "")))
    assert len(environment_subject(repository, name)) == length
    return name


def test_a_127_character_subject_is_accepted() -> None:
    environment = environment_of_subject_length(GOOGLE_SUBJECT_MAX_LENGTH)
    settings = BootstrapSettings.from_config(
        {"repository": REPO, "deployEnvironments": ["prod", environment]}, project="acme-prod"
    )
    assert environment in settings.deploy_environments


def test_a_128_character_subject_is_refused_naming_the_keys_and_the_length() -> None:
    environment = environment_of_subject_length(GOOGLE_SUBJECT_MAX_LENGTH + 1)
    with pytest.raises(BootstrapConfigError) as raised:
        BootstrapSettings.from_config(
            {"repository": REPO, "deployEnvironments": ["prod", environment]}, project="acme-prod"
        )
    message = str(raised.value)
    assert message.startswith("repository and deployEnvironments:")
    assert f"is {GOOGLE_SUBJECT_MAX_LENGTH + 1} characters" in message
    assert f"at most {GOOGLE_SUBJECT_MAX_LENGTH}" in message
    assert environment_subject(REPO, environment) in message


def test_a_long_repository_name_is_refused_with_the_default_environments() -> None:
    """GitHub allows 100 characters for a repository's name: with a long owner, even `dev`
    makes a subject too long."""
    repository = f"{'o' * 39}/{'r' * 100}"
    length = len(environment_subject(repository, "dev"))
    with pytest.raises(
        BootstrapConfigError, match=rf"^repository and deployEnvironments: .* is {length} characters"
    ):
        BootstrapSettings.from_config({"repository": repository}, project="acme-prod")


def test_the_previewers_subject_is_never_the_longest() -> None:
    """`repo:<repository>:pull_request` is shorter than any environment's subject, so the
    environments' check covers the previewer's principal too."""
    repository = f"{'o' * 39}/{'r' * 100}"
    assert all(
        len(pull_request_subject(repository)) < len(environment_subject(repository, name))
        for name in ("e", "dev")
    )
