"""A policy pack config file as the Pulumi engine reads it, for the pack's tests and offline runs.

`pulumi policy enable --config` and `pulumi policy validate-config` take a JSON object keyed by
policy name (or `all`), each value an enforcement level or an object of the policy's config
properties with an optional `enforcementLevel`. The engine fills in each property's schema
`default`, lays the file over it (a property given replaces the default whole), and validates
every policy's properties against its `config_schema` with a JSON Schema validator. This module
does the same, so a test can show what a config file does to the pack without the CLI.

The JSON Schema validation is ours, a small one: the `jsonschema` package is in neither
virtualenv, and pulumi_policy validates nothing itself (the CLI does). It knows only the
keywords below, and refuses a schema that uses another, so a schema can never rely on a keyword
this would silently pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pulumi_policy import EnforcementLevel, Policy

ALL_POLICIES: Final = "all"
LEVEL_KEY: Final = "enforcementLevel"
_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
}
# What the checker below implements; `description` and `default` say nothing to check.
KEYWORDS: Final = frozenset(
    {
        "type",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "items",
        "enum",
        "minItems",
        "minLength",
        "description",
        "default",
    }
)


def schema_problems(value: Any, schema: Mapping[str, Any], where: str) -> list[str]:
    """What is wrong with `value` against `schema`, each problem naming its place `where`."""
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise ValueError(f"{where}: the schema uses {sorted(unknown)}, which this checker does not implement")
    expected = schema.get("type")
    if expected is not None and expected not in _TYPES:
        raise ValueError(f"{where}: the schema's type {expected!r} is not one this checker implements")
    if expected is not None and not isinstance(value, _TYPES[expected]):
        return [f"{where}: expected {expected}, got {value!r}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {', '.join(map(str, schema['enum']))}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        problems.append(f"{where}: at least {schema['minLength']} characters")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: at least {schema['minItems']} items")
        for index, item in enumerate(value):
            problems += schema_problems(item, schema.get("items", {}), f"{where}[{index}]")
    if isinstance(value, dict):
        problems += _object_problems(value, schema, where)
    return problems


def _object_problems(value: dict[str, Any], schema: Mapping[str, Any], where: str) -> list[str]:
    problems = [f"{where}: {key} is required" for key in schema.get("required", ()) if key not in value]
    properties: Mapping[str, Any] = schema.get("properties", {})
    patterns: Mapping[str, Any] = schema.get("patternProperties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        place = f"{where}.{key}"
        matched = [sub for pattern, sub in patterns.items() if re.search(pattern, key)]
        if key in properties:
            problems += schema_problems(item, properties[key], place)
        for sub in matched:
            problems += schema_problems(item, sub, place)
        if key in properties or matched:
            continue
        if extra is False:
            allowed = [*properties, *(f"/{pattern}/" for pattern in patterns)]
            problems.append(f"{place}: not allowed here (allowed: {', '.join(allowed)})")
        elif isinstance(extra, Mapping):
            problems += schema_problems(item, extra, place)
    return problems


@dataclass(frozen=True)
class PolicyConfig:
    """One policy's configuration as the engine hands it to the pack."""

    level: EnforcementLevel | None
    properties: Mapping[str, Any]


def reconcile(
    file: Mapping[str, Any], policies: Sequence[Policy]
) -> tuple[dict[str, PolicyConfig], list[str]]:
    """Each policy's configuration from a config file's JSON object, and every problem the
    engine would refuse the file for (none: the configuration is what the pack runs with)."""
    problems: list[str] = []
    levels = {level.value: level for level in EnforcementLevel}
    given: dict[str, tuple[EnforcementLevel | None, dict[str, Any]]] = {}
    for name, value in file.items():
        if isinstance(value, str):
            value = {LEVEL_KEY: value}
        if not isinstance(value, dict):
            problems.append(f"{name}: {value!r} is not a valid value; must be a string or object")
            continue
        properties = dict(value)
        level = properties.pop(LEVEL_KEY, None)
        if level is not None and level not in levels:
            problems.append(f"{name}: {level!r} is not a valid enforcement level ({', '.join(levels)})")
            continue
        given[name] = (levels[level] if level is not None else None, properties)
    everyone = given.pop(ALL_POLICIES, (None, {}))[0]
    configs: dict[str, PolicyConfig] = {}
    for policy in policies:
        schema = policy.config_schema
        declared = schema.properties if schema is not None else {}
        defaults = {key: sub["default"] for key, sub in declared.items() if "default" in sub}
        level, properties = given.get(policy.name, (None, {}))
        config = PolicyConfig(level or everyone or policy.enforcement_level, {**defaults, **properties})
        configs[policy.name] = config
        if schema is not None:
            whole = {"type": "object", "properties": schema.properties, "required": schema.required or []}
            problems += schema_problems(dict(config.properties), whole, policy.name)
    return configs, problems
