"""The stack's labels on every resource it creates that can carry labels, applied in one place.

The component registers `labelling` as a resource transformation: Pulumi's SDK runs it on the
arguments of every resource the component declares, and of theirs, before it registers them,
so a resource added later is labelled without anyone remembering to. Which resources can carry
labels is read from the provider's own argument classes (a `labels` argument, or an alert
policy's `user_labels`), not from a list kept by hand.

A transformation, not a transform (`transforms=`): the engine runs a transform, and inherits it
to children, in the Pulumi CLI, which the tests under Pulumi's mocks do not have; the SDK runs
a transformation in this process, the same way under the mocks as in `pulumi up`, so what the
tests see labelled is what a deploy labels. Explicit labels, not the provider's
`default_labels`: those need a provider of the program's own, which every resource would be
moved onto, they never reach an alert policy's `user_labels`, and they show in no resource's
inputs, so neither a preview's diff nor the policy pack could see them.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping

import pulumi

# The arguments that hold a resource's labels, by the provider's Python names: most resources'
# `labels`; an alert policy's `user_labels` (its `labels` would be the notification's).
LABEL_ARGUMENTS = ("labels", "user_labels")


def label_argument(resource_class: type[pulumi.Resource]) -> str | None:
    """The argument of `resource_class` that holds its labels, from its `<Class>Args`, which the
    provider's module defines beside it; None: it carries none."""
    module = sys.modules.get(resource_class.__module__)
    args_class = getattr(module, f"{resource_class.__name__}Args", None)
    if not isinstance(args_class, type):
        return None
    parameters = inspect.signature(args_class).parameters
    return next((name for name in LABEL_ARGUMENTS if name in parameters), None)


def labelling(labels: Mapping[str, str]) -> pulumi.ResourceTransformation:
    """A transformation that adds `labels` to every resource that can carry labels, over any
    labels the resource sets itself (a key set both ways gets the stack's value)."""
    stack_labels = dict(labels)

    def label(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if not isinstance(args.resource, pulumi.CustomResource):
            return None
        argument = label_argument(type(args.resource))
        if argument is None:
            return None
        own = args.props.get(argument)
        merged: pulumi.Input[Mapping[str, str]] = (
            {**own, **stack_labels}
            if isinstance(own, Mapping)
            else stack_labels
            if own is None
            else pulumi.Output.from_input(own).apply(lambda given: {**(given or {}), **stack_labels})
        )
        return pulumi.ResourceTransformationResult({**args.props, argument: merged}, args.opts)

    return label
