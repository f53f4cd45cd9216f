"""Sample workflows (jobs with `workflow: {sample: true}`) and the token check they (and the
sample Cloud Run jobs) call."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pulumi
import pulumi_gcp as gcp

from exactly_once.ledger.fields import EXPIRE_AT
from infra.resources.build import BuildIdentity
from infra.resources.function import function_options, function_service, function_uri
from infra.resources.identities import run_invoker, service_account
from infra.resources.ledger import LedgerDatabase, field_options
from infra.settings.environment import token_check_environment
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.grants import WORKFLOW_CALLS_TOKEN_CHECK, Account
from policy.scheduler_guardrails.rules.targets.workflow import WORKFLOWS_API as WORKFLOWS_API
from policy.scheduler_guardrails.rules.targets.workflow import workflow_resource_name

TOKEN_CHECK_ENTRY_POINT = "check_idempotency_token"
# The token check does a few Firestore writes per call; anything slower is a fault to retry.
TOKEN_CHECK_TIMEOUT_SECONDS = 30
# The one copy of the sample workflow; docs/proxy.md shows it verbatim (a test keeps them equal).
SAMPLE_WORKFLOW_FILE = Path(__file__).resolve().with_name("workflow.yaml")


class TokenCheck(NamedTuple):
    uri: pulumi.Output[str]
    # Its Cloud Run service, which callers are granted run.invoker on.
    service: pulumi.Output[str]


class SampleWorkflows(NamedTuple):
    token_check_uri: pulumi.Output[str]
    workflow_account_email: pulumi.Output[str]
    workflows: dict[str, pulumi.Output[str]]
    # Grants a workflow execution uses at once (the workflow account may invoke the check).
    grants: list[pulumi.Resource]


def token_check(
    name: str,
    settings: StackSettings,
    *,
    parent: pulumi.Resource,
    ledger: LedgerDatabase,
    build: BuildIdentity,
    token_check_account: gcp.serviceaccount.Account,
    function_opts: pulumi.ResourceOptions,
    reachable_from_cloud_run: bool,
) -> TokenCheck:
    """The token check (running as its own account: Firestore only, no workflows.invoker).

    Workflows count as internal callers; Cloud Run jobs count only through a VPC network, so
    with a sample Cloud Run job (which has none) the check accepts requests from anywhere, and
    Cloud Run's IAM still admits only the accounts granted run.invoker on it.
    """
    # Token records live in the run ledger's database and expire like run records do.
    # Firestore runs one field operation per database at a time, so this TTL waits for the
    # ledger's field settings.
    gcp.firestore.Field(
        f"{name}-tokens-ttl",
        project=settings.project,
        database=ledger.database_name,
        collection=settings.idempotency_collection,
        field=EXPIRE_AT,
        ttl_config={},
        index_config={},
        opts=field_options(settings, parent, ledger.last_field),
    )
    function = gcp.cloudfunctionsv2.Function(
        f"{name}-token-check",
        project=settings.project,
        location=settings.region,
        name=settings.names.function_name("token-check"),
        description="Idempotency token check: lets a workflow or job run its state-changing step once.",
        build_config=build.config(TOKEN_CHECK_ENTRY_POINT),
        service_config={
            "service_account_email": token_check_account.email,
            "timeout_seconds": TOKEN_CHECK_TIMEOUT_SECONDS,
            "max_instance_count": settings.max_instances,
            "ingress_settings": "ALLOW_ALL" if reachable_from_cloud_run else "ALLOW_INTERNAL_ONLY",
            "all_traffic_on_latest_revision": True,
            "environment_variables": token_check_environment(settings),
        },
        opts=function_options(function_opts),
    )
    return TokenCheck(function_uri(function), function_service(function))


def sample_workflows(
    name: str,
    settings: StackSettings,
    *,
    parent: pulumi.Resource,
    token_check: TokenCheck,
    iam_api: pulumi.Resource,
    workflows_api: pulumi.Resource,
) -> SampleWorkflows:
    """One workflow per sample job, all running as one workflow account that may invoke only
    the token check."""
    project, region = settings.project, settings.region
    token_check_uri = token_check.uri
    workflow_account = service_account(
        name,
        Account.SAMPLE_WORKFLOW,
        "sample workflows",
        "Runs the sample workflows; may invoke only the token-check function.",
        settings,
        pulumi.ResourceOptions(parent=parent, depends_on=[iam_api]),
    )
    token_check_binding = run_invoker(
        f"{name}-workflow-run-invoker",
        WORKFLOW_CALLS_TOKEN_CHECK,
        settings,
        token_check.service,
        workflow_account.member,
        pulumi.ResourceOptions(parent=parent),
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
            lambda parts: workflow_resource_name(*parts)
        )
    return SampleWorkflows(
        token_check_uri=token_check_uri,
        workflow_account_email=workflow_account.email,
        workflows=workflows,
        grants=[token_check_binding],
    )
