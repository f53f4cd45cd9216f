"""Reading a deployment's environment variables, wherever its resource kind keeps them.

A Cloud Functions v2 function keeps them in `serviceConfig.environmentVariables`, a v1
function in `environmentVariables`, a Cloud Run service or job as `envs` lists of its
containers. The function's own variables are named by the function's package
(`exactly_once.config`), so the rules read them by those names, never by a spelling of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pulumi_policy import PolicyResource

from .props import MISSING, UNKNOWN, elements, lookup
from .types import CLOUD_RUN_V2_SERVICE, FUNCTION_V1, FUNCTION_V2


def function_env(function: PolicyResource, variable: str) -> Any:
    """A Cloud Functions v2 function's variable: value, MISSING or UNKNOWN."""
    return lookup(function.props, "serviceConfig", "environmentVariables", variable)


def env_of(resource_type: str, props: Any, variable: str) -> Any:
    """A function's or Cloud Run service's environment variable: value, MISSING or UNKNOWN."""
    if resource_type == FUNCTION_V2:
        return lookup(props, "serviceConfig", "environmentVariables", variable)
    if resource_type == FUNCTION_V1:
        return lookup(props, "environmentVariables", variable)
    containers = elements(props, "template", "containers")
    if containers is UNKNOWN:
        return UNKNOWN
    found: Any = MISSING
    for container in containers if isinstance(containers, list) else []:
        envs = elements(container, "envs")
        if envs is UNKNOWN:
            found = UNKNOWN
        for env in envs if isinstance(envs, list) else []:
            name = lookup(env, "name")
            if name is UNKNOWN:
                found = UNKNOWN
            elif name == variable:
                return lookup(env, "value")
    return found


def plain_env(resource_type: str, props: Any) -> Iterable[tuple[str, Any]]:
    """(name, literal value) of every plain variable of a function, Cloud Run service or Cloud
    Run job; secret references carry no value."""
    if resource_type in (FUNCTION_V2, FUNCTION_V1):
        path = (
            ("serviceConfig", "environmentVariables")
            if resource_type == FUNCTION_V2
            else ("environmentVariables",)
        )
        env = lookup(props, *path)
        if isinstance(env, Mapping):
            yield from ((str(k), lookup(env, k)) for k in env)
        return
    template = ("template",) if resource_type == CLOUD_RUN_V2_SERVICE else ("template", "template")
    containers = elements(props, *template, "containers")
    for container in containers if isinstance(containers, list) else []:
        envs = elements(container, "envs")
        for env in envs if isinstance(envs, list) else []:
            name = lookup(env, "name")
            if isinstance(name, str):
                yield name, lookup(env, "value")
