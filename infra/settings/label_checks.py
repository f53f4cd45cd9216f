"""A fork's own labels (`labels`) checked against Google Cloud's rules, naming each label's key.

A label Google refuses would fail the update at the first resource that carries it, after
others were already changed; checked here, the whole config is refused before any resource is
declared, every bad label named at once. The rules are infra/config/labels.py's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from infra.config.labels import (
    MAX_FORK_LABELS,
    MAX_LABELS_PER_RESOURCE,
    PROVIDER_LABEL,
    STACK_LABEL,
    key_problem,
    value_problem,
)
from policy.scheduler_guardrails.rules.config.problems import ConfigProblems

LABELS_KEY = "labels"
# A label key `pulumi config set --path` can name after a dot (`labels.team`); one with a dot,
# a bracket, a quote or a space goes in brackets (`labels["cost.center"]`).
_PATH_WORD = re.compile(r"^[^\s.\[\]\"']+$")


def fork_labels(raw: Mapping[str, Any], errors: ConfigProblems) -> tuple[tuple[str, str], ...]:
    """The valid labels of `raw` (the `labels` key's value, a map: schema.scalar_value refuses
    anything else), in order; each problem appended to `errors`, naming the label's own config
    key and the limit it breaks."""
    labels: list[tuple[str, str]] = []
    for key, value in raw.items():
        name, text = str(key), _label_text(value)
        problem = _label_problem(name, value, text)
        if problem is not None:
            path = f"{LABELS_KEY}.{name}" if _PATH_WORD.match(name) else f"{LABELS_KEY}[{json.dumps(name)}]"
            errors.append(f"{errors.key(path)}: {problem}")
        elif text is not None:
            labels.append((name, text))
    if len(raw) > MAX_FORK_LABELS:
        errors.append(
            f"{errors.key(LABELS_KEY)}: {len(raw)} labels; at most {MAX_FORK_LABELS}: a resource carries at "
            f"most {MAX_LABELS_PER_RESOURCE}, and {STACK_LABEL} and {PROVIDER_LABEL} take two of them"
        )
    return tuple(labels)


def _label_problem(name: str, value: Any, text: str | None) -> str | None:
    """Why the label `name: value` cannot be set (None: it can)."""
    if name == STACK_LABEL:
        return f"{STACK_LABEL!r} is the stack's own label (its name, on every resource); choose another key"
    if name == PROVIDER_LABEL:
        return f"{PROVIDER_LABEL!r} is the label Pulumi's Google Cloud provider sets; choose another key"
    if (problem := key_problem(name)) is not None:
        return problem
    if text is None:
        return f"{value!r} is not a string; a label value is a string ('' for none)"
    return value_problem(text)


def _label_text(value: Any) -> str | None:
    """`value` as a label value: a string; a whole number or a boolean as YAML and `pulumi config
    set --path` turn `1234` and `true` into one, as written (None: no label value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    return None
