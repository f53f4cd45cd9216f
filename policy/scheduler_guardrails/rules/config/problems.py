"""How a config is refused: every problem at once, each naming the key to edit.

The stack's settings and the rules the policy pack shares with them (a job's access, its
target, its body) report through these, so a problem reads the same from `pulumi up`,
`make check` and the pack.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any


class SettingsError(ValueError):
    """A stack config that must not be deployed; the message names the config keys to fix."""


class ConfigProblems(list[str]):
    """Every problem found in one stack's config, each naming the fully qualified key a user
    has to edit (`<project>:jobs[0].schedule`), so one `pulumi up` shows them all."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace

    def key(self, name: str) -> str:
        """`name` as `pulumi config set` and `Pulumi.<stack>.yaml` spell it."""
        return f"{self.namespace}:{name}"


def unknown_keys(
    raw: Mapping[str, Any], key: str, known: tuple[str, ...], errors: ConfigProblems, what: str = "key"
) -> None:
    """Each unknown key, with the known one it most resembles (`timeout`: `timeoutSeconds`,
    `timezone`: `timeZone`): a typo is the usual cause, and YAML keys are case-sensitive.
    `key` is the object's own key (empty: the top level); `what` names the kind of key."""
    for name in raw:
        if name in known:
            continue
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; expected one of {', '.join(known)}"
        errors.append(f"{errors.key(f'{key}.{name}' if key else str(name))}: unknown {what}{hint}")
