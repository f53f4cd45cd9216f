"""A resource rule written as a generator of messages, made a Pulumi policy.

Rules yield one message per problem and know nothing of `ReportViolation`, so tests and the
registry (policies.py) call them alike, and a rule cannot forget to filter by type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)


def resource_policy(
    name: str,
    description: str,
    level: EnforcementLevel,
    types: Iterable[str] | Callable[[str], bool],
    check: Callable[[ResourceValidationArgs], Iterable[str]],
    config_schema: PolicyConfigSchema | None = None,
) -> ResourceValidationPolicy:
    """A policy that runs `check` on resources of the given types and reports each message;
    `check` reads the policy's config, if it has a `config_schema`, from its args."""
    applies = types if callable(types) else frozenset(types).__contains__

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if not applies(args.resource_type):
            return
        for message in check(args):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=level,
        config_schema=config_schema,
    )
