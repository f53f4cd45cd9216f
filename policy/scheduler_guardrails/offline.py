"""Run the pack's policies the way the Pulumi engine would, without the CLI: `make check`
runs them on every stack under mocks, the policy tests on resources they craft, and dump.py on
a stack's resources as `pulumi stack export` or `pulumi preview --json` wrote them.

Properties go through the same path as in `pulumi_policy`'s analyzer: the SDK's wire
encoding, a protobuf Struct (numbers become floats), `MessageToDict`, `deserialize_properties`, then the
unknown-checking proxy that raises on preview-time unknowns.

Those three come from the SDK's own modules (`pulumi_policy.deserialize`, `pulumi_policy.proxy`),
which its package does not export: it offers no public way to turn properties into what a
policy receives, since only its analyzer does that. A copy of our own would be a model of the
SDK that an upgrade could leave behind without a failing test; the SDK's functions, pinned in
policy/requirements.txt, either behave as the analyzer does or fail to import. The pack itself
needs `pulumi_policy.proxy` anyway: the error its proxy raises on an unknown is what
engine/props.py catches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from inspect import isawaitable
from typing import Any

from google.protobuf import json_format, struct_pb2  # type: ignore[import-untyped]
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties, serialize_properties
from pulumi_policy.proxy import (
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_STRING_VALUE,
    unknown_checking_proxy,
)

from .engine.pack_config import reconcile
from .policies import POLICIES

# What the engine sends for values it cannot know during preview.
UNKNOWN_STRING = UNKNOWN_STRING_VALUE
UNKNOWN_NUMBER = UNKNOWN_NUMBER_VALUE
UNKNOWN_BOOL = UNKNOWN_BOOLEAN_VALUE

# The URN of a resource made up here: no stack or project owns it, and no policy reads either.
STACK_URN_PREFIX = "urn:pulumi:offline::offline::"


def engine_props(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """`raw` as a policy receives it from the engine (assets and archives included)."""
    struct = struct_pb2.Struct()
    struct.update(dict(serialize_properties(raw)))
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct)))


def urn(resource_type: str, name: str) -> str:
    return f"{STACK_URN_PREFIX}{resource_type}::{name}"


def _options() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)


@dataclass
class Reported:
    """Violations a policy reported: messages, and the URN each was attached to."""

    violations: list[tuple[str, str | None]] = field(default_factory=list)

    def __call__(self, message: str, urn: str | None = None) -> None:
        assert isinstance(message, str) and message
        self.violations.append((message, urn))

    @property
    def messages(self) -> list[str]:
        return [message for message, _ in self.violations]


def run_resource_policy(
    policy: ResourceValidationPolicy,
    resource_type: str,
    props: Mapping[str, Any],
    name: str = "res",
    config: Mapping[str, Any] | None = None,
) -> list[str]:
    """Messages `policy` reports for one resource, given its `config` as the engine hands it
    (pack_config.reconcile: the declared defaults and the config file's values)."""
    args = ResourceValidationArgs(
        resource_type, engine_props(props), urn(resource_type, name), name, _options(), None, config
    )
    reported = Reported()
    result = policy.validate(args, reported)
    assert not isawaitable(result)
    return reported.messages


def stack_resource(
    resource_type: str,
    name: str,
    props: Mapping[str, Any],
    dependencies: Sequence[PolicyResource] = (),
) -> PolicyResource:
    return PolicyResource(
        resource_type,
        engine_props(props),
        urn(resource_type, name),
        name,
        _options(),
        None,
        None,
        list(dependencies),
        {},
    )


def run_stack_policy(
    policy: StackValidationPolicy,
    resources: Sequence[PolicyResource],
    config: Mapping[str, Any] | None = None,
) -> Reported:
    """Violations `policy` reports for a whole stack, given its `config`."""
    reported = Reported()
    result = policy.validate(StackValidationArgs(list(resources), config), reported)
    assert not isawaitable(result)
    return reported


def resource_policy(name: str) -> ResourceValidationPolicy:
    """The pack's resource policy called `name`."""
    found = next(p for p in POLICIES if p.name == name)
    assert isinstance(found, ResourceValidationPolicy), name
    return found


def stack_policy(name: str) -> StackValidationPolicy:
    """The pack's stack policy called `name`."""
    found = next(p for p in POLICIES if p.name == name)
    assert isinstance(found, StackValidationPolicy), name
    return found


@dataclass(frozen=True)
class Violation:
    policy: str
    resource: str | None  # None: reported by a stack policy
    message: str
    advisory: bool  # the policy's enforcement level: advisory ones are printed, never fail

    def __str__(self) -> str:
        where = f" {self.resource}" if self.resource is not None else ""
        return f"{self.policy}{where}: {self.message}"


def pack_violations(
    resources: Iterable[tuple[str, str, Mapping[str, Any], Mapping[str, Any]]],
    config_file: Mapping[str, Any] | None = None,
) -> list[Violation]:
    """Every violation of every policy of the pack, as the engine applies them: resource
    policies see each (type, name, inputs, outputs)'s inputs, stack policies every resource's
    outputs; each policy with its configuration and enforcement level from `config_file` (a
    policy config file's JSON, pack_config.py; none: the pack's defaults). A disabled policy
    runs not at all; a config file the engine would refuse raises ValueError."""
    configs, problems = reconcile(config_file or {}, POLICIES)
    if problems:
        raise ValueError("the policy config is refused: " + "; ".join(problems))
    running = [policy for policy in POLICIES if configs[policy.name].level != EnforcementLevel.DISABLED]
    found: list[Violation] = []
    stack = []
    for typ, name, inputs, outputs in resources:
        stack.append(stack_resource(typ, name, outputs))
        for policy in running:
            config = configs[policy.name]
            if isinstance(policy, ResourceValidationPolicy):
                advisory = config.level == EnforcementLevel.ADVISORY
                found += [
                    Violation(policy.name, name, m, advisory)
                    for m in run_resource_policy(policy, typ, inputs, name, config.properties)
                ]
    for policy in running:
        config = configs[policy.name]
        if isinstance(policy, StackValidationPolicy):
            advisory = config.level == EnforcementLevel.ADVISORY
            messages = run_stack_policy(policy, stack, config.properties).messages
            found += [Violation(policy.name, None, m, advisory) for m in messages]
    return found


def violations(resources: Iterable[tuple[str, str, Mapping[str, Any], Mapping[str, Any]]]) -> list[str]:
    """'<policy> <resource>: <message>' for every violation, advisory ones included."""
    return [str(violation) for violation in pack_violations(resources)]
