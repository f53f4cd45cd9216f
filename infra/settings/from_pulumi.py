"""Stack settings from the running Pulumi program's config (`pulumi up -s <stack>`).

Kept apart from infra/settings/stack.py, which must stay importable without the Pulumi engine.
"""

from __future__ import annotations

from typing import Any

import pulumi

from infra.config.schema import CONFIG_KEYS, JOBS_KEY
from infra.settings.loading import settings_from_config
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.problems import SettingsError


def settings_from_pulumi_config() -> StackSettings:
    """Validated settings of the current stack, or a clean `pulumi up` failure naming the keys.

    Raised before the component exists, so a bad config never touches a resource. The keys
    live in the project's own namespace: a fork that renames the project reads its own keys.
    """
    namespace = pulumi.get_project()
    config = pulumi.Config(namespace)
    gcp_config = pulumi.Config("gcp")
    values: dict[str, Any] = {}
    try:
        for key in CONFIG_KEYS:
            # Pulumi hands scalars to the program as strings; parse them by declared type.
            # Unset keys stay absent, so the defaults in infra/settings/stack.py apply.
            if key.type == "integer":
                value: Any = config.get_int(key.name)
            elif key.type == "boolean":
                value = config.get_bool(key.name)
            elif key.type in ("array", "object"):
                value = config.get_object(key.name)
            else:
                value = config.get(key.name)
            if value is not None:
                values[key.name] = value
        if (jobs := config.get_object(JOBS_KEY)) is not None:
            values[JOBS_KEY] = jobs
    except pulumi.ConfigTypeError as error:
        raise pulumi.RunError(f"invalid stack config: {error}") from error
    try:
        return settings_from_config(
            values,
            project=gcp_config.get("project") or "",
            region=gcp_config.get("region") or "",
            stack=pulumi.get_stack(),
            namespace=namespace,
        )
    except SettingsError as error:
        raise pulumi.RunError(str(error)) from error
