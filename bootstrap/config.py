"""BootstrapSettings from the running Pulumi program's config.

The namespace is the project's name (`pulumi.Config()`), so a fork that renames the bootstrap
project in Pulumi.yaml keeps its keys working.
"""

from __future__ import annotations

from typing import Any

import pulumi

from bootstrap.settings import BootstrapConfigError, BootstrapSettings

CONFIG_KEYS = (
    "repository",
    "repositoryId",
    "poolId",
    "providerId",
    "deployerAccountId",
    "previewerAccountId",
    "defaultBranch",
    "deployEnvironments",
    "stateBucket",
    "stateBucketLocation",
    "secretsKeyRing",
    "secretsKeyLocation",
    "jobGrants",
)
# Keys whose values are lists, not strings.
LIST_KEYS = frozenset({"deployEnvironments", "jobGrants"})


def settings_from_pulumi_config() -> BootstrapSettings:
    """Validated settings, or a clean `pulumi up` failure naming the key before any resource."""
    config = pulumi.Config()
    gcp_config = pulumi.Config("gcp")
    values: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        try:
            value = config.get_object(key) if key in LIST_KEYS else config.get(key)
        except pulumi.ConfigTypeError as error:
            raise pulumi.RunError(f"invalid bootstrap config: {key}: {error}") from error
        if value is not None:
            values[key] = value
    try:
        return BootstrapSettings.from_config(
            values, project=gcp_config.get("project") or "", region=gcp_config.get("region") or ""
        )
    except BootstrapConfigError as error:
        raise pulumi.RunError(f"invalid bootstrap config: {error}") from error
