"""The stack's outputs: one list that the component registers, `__main__.py` exports and
docs/stack.md tabulates.

Each output names the ExactlyOnceScheduler attribute it holds and, when only some stacks have
it, the condition, read from the settings: a stack without a sample workflow has no workflow
account to export, so it exports no `workflowServiceAccount` at all rather than a null. Adding
an output here is all it takes to register, export and document it (`make docs` writes the
table).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infra.plan.catchup import catches_up
from infra.plan.needs import needs_token_check
from infra.settings.kept_settings import DATABASE_OUTPUT, REGION_OUTPUT, RUNS_COLLECTION_OUTPUT
from infra.settings.stack import StackSettings


@dataclass(frozen=True)
class OutputCondition:
    """Which stacks have an output, as the docs say it and as the settings decide it."""

    shown: str  # "a sample workflow": the docs say "Only with a sample workflow."
    holds: Callable[[StackSettings], bool]


SAMPLE_WORKFLOW = OutputCondition("a sample workflow", lambda settings: bool(settings.sample_workflow_jobs()))
TOKEN_CHECK = OutputCondition("a sample workflow or a sample Cloud Run job", needs_token_check)
CATCHUP = OutputCondition("a job that has `catchup`", catches_up)


@dataclass(frozen=True)
class StackOutput:
    name: str
    attribute: str  # of ExactlyOnceScheduler
    description: str
    only_with: OutputCondition | None = None

    def applies_to(self, settings: StackSettings) -> bool:
        return self.only_with is None or self.only_with.holds(settings)


STACK_OUTPUTS: tuple[StackOutput, ...] = (
    StackOutput("functionUri", "function_uri", "The function's Cloud Run URI (also the OIDC audience)."),
    StackOutput("jobNames", "job_names", "The Cloud Scheduler job ids."),
    StackOutput(
        "runtimeServiceAccount",
        "runtime_service_account_email",
        "Email of the function's runtime service account.",
    ),
    StackOutput(
        "invokerServiceAccount",
        "invoker_service_account_email",
        "Email of the account that signs Cloud Scheduler's OIDC tokens.",
    ),
    StackOutput(
        "buildServiceAccount",
        "build_service_account_email",
        "Email of the account Cloud Build builds the function(s) as.",
    ),
    StackOutput(
        DATABASE_OUTPUT,
        "database_name",
        "The Firestore database of the run ledger; the next update refuses another (docs/deploy.md).",
    ),
    StackOutput(
        RUNS_COLLECTION_OUTPUT,
        "runs_collection",
        "The collection of run records; the next update refuses another (docs/deploy.md).",
    ),
    StackOutput(
        REGION_OUTPUT,
        "region",
        "The region of the stack's regional resources; the next update refuses another (docs/deploy.md).",
    ),
    StackOutput("tokenCheckUri", "token_check_uri", "The token check function's URI.", TOKEN_CHECK),
    StackOutput(
        "tokenCheckServiceAccount",
        "token_check_service_account_email",
        "Email of the token check's own service account.",
        TOKEN_CHECK,
    ),
    StackOutput(
        "workflowServiceAccount",
        "workflow_service_account_email",
        "Email of the account every sample workflow runs as.",
        SAMPLE_WORKFLOW,
    ),
    StackOutput(
        "sampleWorkflows",
        "sample_workflows",
        "Job name → `projects/<p>/locations/<l>/workflows/<w>` of its sample workflow.",
        SAMPLE_WORKFLOW,
    ),
    StackOutput(
        "catchupQueue",
        "catchup_queue",
        "`projects/<p>/locations/<l>/queues/<q>` of the catch-up queue (the first region's), which "
        "`ops backfill --since/--until` sends through; its name ends in when it was created.",
        CATCHUP,
    ),
)


def outputs_of(settings: StackSettings) -> tuple[StackOutput, ...]:
    """The outputs a stack with these settings has."""
    return tuple(output for output in STACK_OUTPUTS if output.applies_to(settings))
