"""Roles no grant may carry as they are: primitive roles, and Firestore access without a
condition naming the database.

- no-primitive-roles: owner, editor and viewer cover nearly every service in the project;
- datastore-user-conditional: Firestore has no per-database IAM resource, so
  roles/datastore.user reaches every database of the project unless a condition limits it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pulumi_policy import ResourceValidationArgs

from ..engine.grants import iam_grants
from ..engine.props import UNKNOWN, is_blank, lookup
from ..engine.types import is_iam_type

PRIMITIVE_ROLES: Final = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
CONDITIONAL_ROLES: Final = frozenset({"roles/datastore.user"})


def check_no_primitive_roles(args: ResourceValidationArgs) -> Iterable[str]:
    if not is_iam_type(args.resource_type):
        return
    for grant in iam_grants(args.props):
        if isinstance(grant.role, str) and grant.role in PRIMITIVE_ROLES:
            yield (
                f"{args.resource_type} '{args.name}': role {grant.role} ({grant.where}) is a primitive role "
                "that covers nearly every service in the project. Grant the narrowest predefined role "
                "instead (roles/run.invoker, roles/datastore.user with a condition, ...)."
            )


def check_conditional_roles(args: ResourceValidationArgs) -> Iterable[str]:
    if not is_iam_type(args.resource_type):
        return
    for grant in iam_grants(args.props):
        if not (isinstance(grant.role, str) and grant.role in CONDITIONAL_ROLES):
            continue
        if grant.condition is UNKNOWN:
            continue
        expression = lookup(grant.condition, "expression")
        if expression is UNKNOWN:
            continue
        if is_blank(expression):
            yield (
                f"{args.resource_type} '{args.name}': {grant.role} ({grant.where}) has no condition, so it "
                "reaches every Firestore database in the project. Add condition {title, expression} "
                "limiting it to this database, e.g. "
                "resource.name.startsWith('projects/<project>/databases/<database>')."
            )
