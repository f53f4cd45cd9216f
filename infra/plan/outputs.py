"""The stack's outputs: one list that `__main__.py` exports and docs/stack.md tabulates.

Each output names the ExactlyOnceScheduler attribute it exports, so adding one here is all it
takes to export and document it (`make docs` writes the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

if TYPE_CHECKING:
    from infra.component import ExactlyOnceScheduler


@dataclass(frozen=True)
class StackOutput:
    name: str
    attribute: str  # of ExactlyOnceScheduler
    description: str
    # Exported only when some job has `workflow: {sample: true}` (the token check exists).
    sample_workflow_only: bool = False


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
    StackOutput("databaseName", "database_name", "The Firestore database of the run ledger."),
    StackOutput("runsCollection", "runs_collection", "The collection of run records."),
    StackOutput(
        "tokenCheckUri", "token_check_uri", "The token check function's URI.", sample_workflow_only=True
    ),
    StackOutput(
        "tokenCheckServiceAccount",
        "token_check_service_account_email",
        "Email of the token check's own service account.",
        sample_workflow_only=True,
    ),
    StackOutput(
        "workflowServiceAccount",
        "workflow_service_account_email",
        "Email of the account every sample workflow runs as.",
        sample_workflow_only=True,
    ),
    StackOutput(
        "sampleWorkflows",
        "sample_workflows",
        "Job name → `projects/<p>/locations/<l>/workflows/<w>` of its sample workflow.",
        sample_workflow_only=True,
    ),
)


def export_outputs(scheduler: ExactlyOnceScheduler) -> None:
    """`pulumi.export` every output the component has; the sample-workflow ones only with one."""
    has_sample_workflow = scheduler.token_check_uri is not None
    for output in STACK_OUTPUTS:
        if has_sample_workflow or not output.sample_workflow_only:
            pulumi.export(output.name, getattr(scheduler, output.attribute))
