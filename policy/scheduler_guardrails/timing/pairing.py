"""Which function a Scheduler job calls, so that its timing is read from the right pair.

A stack may deploy several functions (the token check among them, the same function in a
second region); a job's timing is judged against the function its `httpTarget.uri` names, else
the one it depends on, else the one in its own region, else the only one.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import PolicyResource

from ..engine.props import lookup


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
    # A stack in two regions deploys the function in each, and each region's jobs call their
    # own region's: the one function in the job's region, when its URI and links cannot tell.
    region = lookup(job.props, "region")
    if isinstance(region, str) and region:
        regional = [f for f in functions if lookup(f.props, "location") == region]
        if len(regional) == 1:
            return regional[0]
    return functions[0] if len(functions) == 1 else None


def _same_endpoint(uri: str, base: Any) -> bool:
    """True when `uri` is `base` or a path/query below it."""
    if not isinstance(base, str) or not base:
        return False
    base = base.rstrip("/")
    return uri == base or uri.startswith((base + "/", base + "?"))
