"""The stack's config keys, their defaults, and the namespace they live in.

The namespace is the Pulumi project's name: `pulumi config set <project>:<key>`. A fork that
renames its project in Pulumi.yaml moves every key with it, so nothing here spells the name
out; the program asks `pulumi.get_project()` and the local tools read Pulumi.yaml's `name:`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, cast

import yaml

# Re-exported: the settings and their tests name the repository through this module.
from exactly_once.config import DEFAULT_DATABASE as DEFAULT_DATABASE
from infra.config.paths import FUNCTION_DIR as FUNCTION_DIR
from infra.config.paths import REPO_ROOT as REPO_ROOT
from policy.scheduler_guardrails.rules.config.problems import ConfigProblems, SettingsError

PROJECT_FILE = "Pulumi.yaml"

INGRESS_SETTINGS = ("ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_ALL")
# The database most projects already have. It is never created (a create would get 409).
# "object": a map of strings, which Pulumi's project config cannot type; Pulumi.yaml declares
# such a key with a default (`{}`) and no type, and the settings check its values.
ConfigType = Literal["string", "integer", "boolean", "array", "object"]


def read_yaml(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise SettingsError(f"{path} does not exist")
    loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(loaded, Mapping):
        raise SettingsError(f"{path} is not a YAML mapping")
    return loaded


@dataclass(frozen=True)
class ConfigKey:
    """One stack config key, as Pulumi.yaml's `config:` section declares it.

    `default` None: the default depends on other keys, so Pulumi.yaml cannot declare it (a
    declared key without a default would be required) and the key is declared here instead.
    """

    name: str
    type: ConfigType
    default: str | int | bool | tuple[str, ...] | Mapping[str, str] | None
    description: str


# The types Pulumi.yaml may spell out (Pulumi's own).
_CONFIG_TYPES: tuple[ConfigType, ...] = ("string", "integer", "boolean", "array")

# Declared here because its default is derived: Pulumi.yaml cannot hold it (see ConfigKey).
DERIVED_DEFAULT_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "createDatabase",
        "boolean",
        None,
        "Create the database (true) or use an existing one as it is (false). Default: true for the "
        "stack's own database and any named one, false for '(default)'.",
    ),
)


def declared_config_keys(root: Path = REPO_ROOT) -> tuple[ConfigKey, ...]:
    """The keys Pulumi.yaml declares (type, default, description), read from the one place
    `pulumi config` also reads them, followed by the keys whose default is derived."""
    declared = read_yaml(root / PROJECT_FILE).get("config") or {}
    keys: list[ConfigKey] = []
    for name, schema in declared.items():
        default = schema.get("default")
        kind = schema.get("type")
        if kind is None and isinstance(default, Mapping):
            kind = "object"  # untyped, with a map for its default (see ConfigType)
        elif kind not in _CONFIG_TYPES:
            kind = None
        if kind is None or "default" not in schema or not schema.get("description"):
            raise SettingsError(
                f"{root / PROJECT_FILE}: config key {name!r} needs a type, default and description"
            )
        if isinstance(default, list):
            default = tuple(default)
        elif isinstance(default, Mapping):
            default = MappingProxyType(dict(default))
        keys.append(
            ConfigKey(name, cast(ConfigType, kind), default, " ".join(str(schema["description"]).split()))
        )
    return (*keys, *DERIVED_DEFAULT_KEYS)


# `jobs` is a list of objects, which Pulumi's project config schema cannot type, so it is
# validated in infra/settings/jobs.py and documented in docs/stack.md.
CONFIG_KEYS: tuple[ConfigKey, ...] = declared_config_keys()
KEYS_BY_NAME = {key.name: key for key in CONFIG_KEYS}
_NOTIFICATION_CHANNEL = re.compile(r"^projects/[^/]+/notificationChannels/[^/]+$")
JOBS_KEY = "jobs"


def project_name(root: Path = REPO_ROOT) -> str:
    """The Pulumi project's name (`name:` in Pulumi.yaml): the config namespace of every stack."""
    name = read_yaml(root / PROJECT_FILE).get("name")
    if not isinstance(name, str) or not name.strip():
        raise SettingsError(f"{root / PROJECT_FILE}: `name:` is not set")
    return name.strip()


def scalar_value(values: Mapping[str, Any], key: ConfigKey, errors: ConfigProblems) -> Any:
    """The value of `key`, type-checked; its default (None: derived later) when unset or wrong."""
    value: Any = values.get(key.name, key.default)
    if value is None:
        return key.default
    # bool is an int in Python, but `true` is never a sensible number of seconds.
    if key.type == "boolean" and isinstance(value, bool):
        return value
    if key.type == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if key.type == "string" and isinstance(value, str):
        return value
    if key.type == "array" and isinstance(value, list | tuple):
        return tuple(value)
    if key.type == "object" and isinstance(value, Mapping):
        return value
    expected = "a map of keys to string values" if key.type == "object" else key.type
    errors.append(f"{errors.key(key.name)}: expected {expected}, got {value!r}")
    return key.default


def integer_value(value: Any) -> int:
    """An integer key's value; 0 when it was reported as not an integer (the error says so)."""
    return value if isinstance(value, int) else 0


def notification_channels(raw: Any, errors: ConfigProblems) -> tuple[str, ...]:
    channels: list[str] = []
    for index, channel in enumerate(raw or ()):
        if isinstance(channel, str) and _NOTIFICATION_CHANNEL.match(channel):
            channels.append(channel)
        else:
            errors.append(
                f"{errors.key(f'alertNotificationChannels[{index}]')}: {channel!r} is not a notification "
                "channel (projects/<project>/notificationChannels/<id>, as `gcloud beta monitoring "
                "channels list` prints it)"
            )
    return tuple(channels)
