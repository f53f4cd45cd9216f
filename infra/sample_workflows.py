"""Sample workflows (jobs with `workflow: {sample: true}`) and the token check they call."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pulumi
import pulumi_gcp as gcp

from infra.build import BuildIdentity
from infra.settings import StackSettings

TOKEN_CHECK_ENTRY_POINT = "check_idempotency_token"
# The token check does a few Firestore writes per call; anything slower is a fault to retry.
TOKEN_CHECK_TIMEOUT_SECONDS = 30
# The one copy of the sample workflow; docs/proxy.md shows it verbatim (a test keeps them equal).
SAMPLE_WORKFLOW_FILE = Path(__file__).resolve().with_name("sample_workflow.yaml")


class SampleWorkflows(NamedTuple):
    token_check_uri: pulumi.Output[str]
    workflow_account_email: pulumi.Output[str]
    workflows: dict[str, pulumi.Output[str]]
    # Grants a workflow execution uses at once (the workflow account may invoke the check).
    grants: list[pulumi.Resource]


def sample_workflows(
    name: str,
    settings: StackSettings,
    *,
    parent: pulumi.Resource,
    build: BuildIdentity,
    token_check_account: gcp.serviceaccount.Account,
    function_opts: pulumi.ResourceOptions,
    iam_api: pulumi.Resource,
    workflows_api: pulumi.Resource,
) -> SampleWorkflows:
    """The token check (running as its own account: Firestore only, no workflows.invoker) and
    one workflow per sample job, all running as one workflow account that may invoke only the
    token check."""
    project, region = settings.project, settings.region
    token_check = gcp.cloudfunctionsv2.Function(
        f"{name}-token-check",
        project=project,
        location=region,
        name=settings.names.function_name("token-check"),
        description="Idempotency token check: lets a workflow run its state-changing step once.",
        build_config=build.config(TOKEN_CHECK_ENTRY_POINT),
        service_config={
            "service_account_email": token_check_account.email,
            "timeout_seconds": TOKEN_CHECK_TIMEOUT_SECONDS,
            "max_instance_count": settings.max_instances,
            # Only workflows of this project call it, and they count as internal.
            "ingress_settings": "ALLOW_INTERNAL_ONLY",
            "all_traffic_on_latest_revision": True,
            "environment_variables": settings.token_check_environment(),
        },
        opts=function_opts,
    )
    token_check_uri = token_check.service_config.apply(service_uri)
    workflow_account = gcp.serviceaccount.Account(
        f"{name}-workflow",
        project=project,
        account_id=settings.names.service_account_id("workflow"),
        display_name=settings.names.display_name("sample workflows"),
        description="Runs the sample workflows; may invoke only the token-check function.",
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[iam_api]),
    )
    token_check_binding = gcp.cloudrunv2.ServiceIamMember(
        f"{name}-workflow-run-invoker",
        project=project,
        location=region,
        name=token_check.service_config.apply(service_name),
        role="roles/run.invoker",
        member=workflow_account.member,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    workflow_source = SAMPLE_WORKFLOW_FILE.read_text(encoding="utf-8")
    workflows: dict[str, pulumi.Output[str]] = {}
    for job in settings.sample_workflow_jobs():
        workflow = gcp.workflows.Workflow(
            f"{name}-workflow-{job.name}",
            project=project,
            region=region,
            name=settings.names.workflow_name(job.name),
            description=f"Sample workflow of job {job.name}: token check, then its one state change.",
            service_account=workflow_account.name,
            source_contents=workflow_source,
            user_env_vars={"TOKEN_CHECK_URL": token_check_uri},
            # It holds no data, and protection would block renames and `pulumi destroy`.
            deletion_protection=False,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[workflows_api, token_check_binding]),
        )
        workflows[job.name] = pulumi.Output.all(workflow.project, workflow.region, workflow.name).apply(
            lambda parts: "projects/{}/locations/{}/workflows/{}".format(*parts)
        )
    return SampleWorkflows(
        token_check_uri=token_check_uri,
        workflow_account_email=workflow_account.email,
        workflows=workflows,
        grants=[token_check_binding],
    )


def service_uri(config: gcp.cloudfunctionsv2.outputs.FunctionServiceConfig | None) -> str:
    if config is None or not config.uri:
        raise ValueError("the function reported no service URI")
    return config.uri


def service_name(config: gcp.cloudfunctionsv2.outputs.FunctionServiceConfig | None) -> str:
    if config is None or not config.service:
        raise ValueError("the function reported no Cloud Run service")
    return config.service
