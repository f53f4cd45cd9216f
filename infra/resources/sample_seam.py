"""What the component and the samples (`infra/samples/`, an optional part) agree on, so the
component deploys them without naming them.

The samples come in two steps, each where the component has what it needs: the token check
and the samples the runtime account is granted on (deployed before the function, whose grants
name them), then the sample workflows (after the function, whose URI they do not need but
whose serving grants they join). A fork without `infra/samples/` gets `NO_SAMPLES`, which
deploys nothing; its stack has no kind whose sample would need one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pulumi

from infra.resources.build import BuildIdentity
from infra.resources.identities import Identities
from infra.resources.ledger import LedgerDatabase
from infra.settings.stack import StackSettings


@dataclass(frozen=True)
class SampleContext:
    """What the component has made when the samples' first step runs."""

    name: str
    settings: StackSettings
    parent: pulumi.Resource
    # Every API the component enabled, by service name, and the pause after them.
    apis: Mapping[str, pulumi.Resource]
    ready: pulumi.Resource
    ledger: LedgerDatabase
    identities: Identities
    build: BuildIdentity
    # The options of a function deployment (its APIs, the builder's grants in effect).
    function_opts: pulumi.ResourceOptions


@dataclass(frozen=True)
class GrantedSamples:
    """The first step: the token check, and the samples the runtime account is granted on."""

    token_check_uri: pulumi.Output[str] | None = None
    # The token check's Cloud Run service, which its callers are granted run.invoker on.
    token_check_service: pulumi.Output[str] | None = None
    # Resource name (as runtime grants name it) -> the resource the stack created for it.
    created: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    # Grants a sample execution uses at once (its account may invoke the token check).
    grants: Sequence[pulumi.Resource] = ()


@dataclass(frozen=True)
class CallingSamples:
    """The second step: the sample workflows, which Scheduler jobs' bodies name."""

    # Job name -> the full resource name of its sample workflow.
    workflows: Mapping[str, pulumi.Output[str]] = field(default_factory=dict)
    workflow_account_email: pulumi.Output[str] | None = None
    # Grants a workflow execution uses at once (the workflow account may invoke the check).
    grants: Sequence[pulumi.Resource] = ()


class SampleDeployer(Protocol):
    def granted(self, context: SampleContext) -> GrantedSamples: ...

    def calling(self, context: SampleContext, granted: GrantedSamples) -> CallingSamples: ...


class _NoSamples:
    """A fork without the samples' room: nothing to deploy."""

    def granted(self, context: SampleContext) -> GrantedSamples:
        return GrantedSamples()

    def calling(self, context: SampleContext, granted: GrantedSamples) -> CallingSamples:
        return CallingSamples()


NO_SAMPLES: SampleDeployer = _NoSamples()
