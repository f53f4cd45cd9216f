"""The labels the stack puts on its resources, and Google Cloud's rules for labels.

Every resource of the stack that can carry labels carries `eos-stack: <stack name>`, so
`gcloud ... --filter=labels.eos-stack=dev` and a billing report grouped by the label find one
stack's resources among the project's, and a fork's own labels from the `labels` key beside
it. The rules are the ones every Google Cloud API that takes labels documents; the stack
accepts their ASCII part (the APIs allow lower-case international letters too, which not every
tool that reads labels back handles). No Pulumi: the settings check a fork's labels with these
before any resource is declared.
"""

from __future__ import annotations

import re
from typing import Final

# The stack's own label: its key, and the value policy/scheduler_guardrails/rules/config/names.py derives
# from the stack name.
STACK_LABEL: Final = "eos-stack"
# The label Pulumi's Google Cloud provider adds to every resource it creates
# (`addPulumiAttributionLabel`): it takes one of a resource's places too.
PROVIDER_LABEL: Final = "goog-pulumi-provisioned"

KEY_MAX_LENGTH: Final = 63
VALUE_MAX_LENGTH: Final = 63
# How many labels one resource may carry, whoever set them.
MAX_LABELS_PER_RESOURCE: Final = 64
# What a fork may add: the stack's own label and the provider's take two places.
MAX_FORK_LABELS: Final = MAX_LABELS_PER_RESOURCE - 2

LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]*$")
KEY_RULE: Final = (
    f"a label key is 1-{KEY_MAX_LENGTH} of lower-case letters, digits, '_' and '-', starting with a letter"
)
VALUE_RULE: Final = f"a label value is 0-{VALUE_MAX_LENGTH} of lower-case letters, digits, '_' and '-'"


def key_problem(key: str) -> str | None:
    """Why `key` is not a label key (None: it is one), with the limit it breaks."""
    if len(key) > KEY_MAX_LENGTH:
        return f"{key!r} is {len(key)} characters long; {KEY_RULE}"
    if not LABEL_KEY.match(key):
        return f"{key!r} is not a label key: {KEY_RULE}"
    return None


def value_problem(value: str) -> str | None:
    """Why `value` is not a label value (None: it is one), with the limit it breaks."""
    if len(value) > VALUE_MAX_LENGTH:
        return f"{value!r} is {len(value)} characters long; {VALUE_RULE}"
    if not LABEL_VALUE.match(value):
        return f"{value!r} is not a label value: {VALUE_RULE}"
    return None
