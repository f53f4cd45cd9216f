"""Reading IAM grants, however a resource spells them.

An IAM member names one `member`, a binding a list of `members`, and a policy a JSON
`policyData` of bindings; every rule about who holds what reads them as one `IamGrant` each,
so a grant cannot slip past a rule by being written in another form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .props import MISSING, elements, lookup

# How an IAM member names a service account: `serviceAccount:<email>`.
PROJECT_MEMBER_PREFIX: Final = "serviceAccount:"


@dataclass(frozen=True)
class IamGrant:
    """One (role, members, condition) triple however the resource spells it."""

    role: Any
    members: list[Any]
    condition: Any
    where: str


def iam_grants(props: Mapping[str, Any]) -> Iterable[IamGrant]:
    """Every grant an IAM resource makes: `member`, `members`, or the bindings of `policyData`."""
    role = lookup(props, "role")
    condition = lookup(props, "condition")
    member = lookup(props, "member")
    if member is not MISSING:
        yield IamGrant(role, [member], condition, "member")
    members = elements(props, "members")
    if isinstance(members, list):
        yield IamGrant(role, members, condition, "members")
    policy_data = lookup(props, "policyData")
    if isinstance(policy_data, str):
        try:
            parsed = json.loads(policy_data)
        except json.JSONDecodeError:
            return
        bindings = parsed.get("bindings", []) if isinstance(parsed, dict) else []
        for index, binding in enumerate(bindings if isinstance(bindings, list) else []):
            if isinstance(binding, dict):
                raw_members = binding.get("members") or []
                yield IamGrant(
                    binding.get("role", MISSING),
                    list(raw_members) if isinstance(raw_members, list) else [],
                    binding.get("condition") or MISSING,
                    f"policyData.bindings[{index}]",
                )


def account_email(value: str) -> str:
    """The email in a service account reference: `projects/<p>/serviceAccounts/<email>` or bare."""
    return value.strip().rsplit("/", 1)[-1].lower()
