"""Which function a Scheduler job calls, so that its timing is read from the right pair.

A stack may deploy several functions (the token check among them); a job's timing is judged
against the function its `httpTarget.uri` names, else the one it depends on, else the only one.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import PolicyResource

from policy.engine.props import lookup


def function_for(job: PolicyResource, functions: list[PolicyResource]) -> PolicyResource | None:
    """The function a job calls: by URI, then by engine dependency, then the only function."""
    uri = lookup(job.props, "httpTarget", "uri")
    if isinstance(uri, str):
        for function in functions:
            for path in (("url",), ("serviceConfig", "uri")):
                if _same_endpoint(uri, lookup(function.props, *path)):
                    return function
    dependency_urns = {d.urn for d in job.dependencies}
    for deps in job.property_dependencies.values():
        dependency_urns.update(d.urn for d in deps)
    linked = [f for f in functions if f.urn in dependency_urns]
    if len(linked) == 1:
        return linked[0]
    return functions[0] if len(functions) == 1 else None


def _same_endpoint(uri: str, base: Any) -> bool:
    """True when `uri` is `base` or a path/query below it."""
    if not isinstance(base, str) or not base:
        return False
    base = base.rstrip("/")
    return uri == base or uri.startswith((base + "/", base + "?"))
