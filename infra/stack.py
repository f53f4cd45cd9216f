"""The whole deduplicated-scheduled-job stack as one Pulumi ComponentResource.

Read top to bottom, `ExactlyOnceScheduler.__init__` is the architecture: APIs, the Firestore
ledger, two identities, the source, the function, the invoker binding, the jobs. Each resource
keeps all of its arguments in one call so a fork can change one thing in one place.

A fork that wants a second, independent set of jobs instantiates the component again with
another name and other settings (another `databaseName` too, or the runs share a ledger).
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

from infra.settings import REPO_ROOT, JobSettings, StackSettings
from infra.source import source_archive, source_hash

COMPONENT_TYPE = "exactly-once-scheduler:index:ExactlyOnceScheduler"
FUNCTION_RUNTIME = "python312"
FUNCTION_ENTRY_POINT = "handle_scheduled_job"
TOKEN_CHECK_ENTRY_POINT = "check_idempotency_token"
# The token check does a few Firestore writes per call; anything slower is a fault to retry.
TOKEN_CHECK_TIMEOUT_SECONDS = 30
TTL_FIELD = "expire_at"
# The one copy of the sample workflow; the README shows it verbatim (a test keeps them equal).
SAMPLE_WORKFLOW_FILE = Path(__file__).resolve().with_name("sample_workflow.yaml")
# Enabled only when a job starts workflow executions (it also covers the Executions API).
WORKFLOWS_API = "workflows.googleapis.com"
WORKFLOW_NAME_MAX = 64
# What a function deployment needs enabled before it starts.
FUNCTION_APIS = (
    "cloudfunctions.googleapis.com",
    "cloudbuild.googleapis.com",
    "artifactregistry.googleapis.com",
    "run.googleapis.com",
)

# Only what the stack uses; never disabled on destroy, since other workloads may need them.
REQUIRED_APIS = (
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudscheduler.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
)

_RESOURCE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


class ExactlyOnceScheduler(pulumi.ComponentResource):
    """Cloud Scheduler jobs → private Cloud Run function → Firestore run ledger."""

    function_uri: pulumi.Output[str]
    job_names: pulumi.Output[list[str]]
    # Only with a sample workflow (else None / {}): the token check and the workflows.
    build_service_account_email: pulumi.Output[str]
    token_check_uri: pulumi.Output[str] | None
    workflow_service_account_email: pulumi.Output[str] | None
    sample_workflows: pulumi.Output[dict[str, str]]
    runtime_service_account_email: pulumi.Output[str]
    invoker_service_account_email: pulumi.Output[str]
    database_name: pulumi.Output[str]
    runs_collection: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        function_dir: Path = REPO_ROOT / "function",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        if not _RESOURCE_NAME.match(name):
            # The name prefixes service account ids (6-30 chars) and the function name.
            raise ValueError(f"component name {name!r} must be 1-40 of a-z, 0-9, '-', starting with a letter")
        super().__init__(COMPONENT_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        project, region = settings.project, settings.region
        for advisory in settings.timing_advisories():
            pulumi.log.warn(advisory, resource=self)

        uses_workflows = settings.uses_workflows()
        sample_jobs = settings.sample_workflow_jobs()
        apis = {
            api: gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                project=project,
                service=api,
                disable_on_destroy=False,
                opts=child,
            )
            for api in REQUIRED_APIS + ((WORKFLOWS_API,) if uses_workflows else ())
        }

        def after(*names: str) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=[apis[api] for api in names])

        # The run ledger. Deletion protection guards the records that make retries idempotent.
        database = gcp.firestore.Database(
            f"{name}-database",
            project=project,
            name=settings.database_name,
            location_id=region,
            type="FIRESTORE_NATIVE",
            delete_protection_state=(
                "DELETE_PROTECTION_ENABLED" if settings.deletion_protection else "DELETE_PROTECTION_DISABLED"
            ),
            deletion_policy="ABANDON" if settings.deletion_protection else "DELETE",
            opts=after("firestore.googleapis.com"),
        )
        # One TTL policy for every job: expired run records are deleted by Firestore, and the
        # field is exempt from indexing (it is only ever written, never queried).
        runs_ttl = gcp.firestore.Field(
            f"{name}-runs-ttl",
            project=project,
            database=database.name,
            collection=settings.runs_collection,
            field=TTL_FIELD,
            ttl_config={},
            index_config={},
            opts=child,
        )

        # Two identities, so the scheduler can only invoke and the function can only use Firestore.
        runtime_account = gcp.serviceaccount.Account(
            f"{name}-runtime",
            project=project,
            account_id=_account_id(name, "runtime"),
            display_name="Exactly-once scheduler: function runtime",
            description="Runs the dedup function; Firestore access limited to one database.",
            opts=after("iam.googleapis.com"),
        )
        invoker_account = gcp.serviceaccount.Account(
            f"{name}-invoker",
            project=project,
            account_id=_account_id(name, "invoker"),
            display_name="Exactly-once scheduler: job invoker",
            description="Signs Cloud Scheduler's OIDC tokens; may invoke only the dedup function.",
            opts=after("iam.googleapis.com"),
        )
        database_resource = f"projects/{project}/databases/{settings.database_name}"
        gcp.projects.IAMMember(
            f"{name}-runtime-datastore-user",
            project=project,
            role="roles/datastore.user",
            member=runtime_account.email.apply(lambda email: f"serviceAccount:{email}"),
            condition={
                "title": f"only-{settings.database_name}"[:100],
                "description": "Firestore access limited to the run ledger database of this stack.",
                # The exact database or its documents; a mere prefix would also match
                # "<name>-other" databases.
                "expression": (
                    f'resource.name == "{database_resource}" || '
                    f'resource.name.startsWith("{database_resource}/")'
                ),
            },
            opts=child,
        )
        if uses_workflows:
            # Workflows has no per-workflow IAM resource, so starting executions needs a
            # project-level grant; only made when some job goes through the Workflows proxy.
            # The policy pack allows exactly this role for exactly this account.
            gcp.projects.IAMMember(
                f"{name}-runtime-workflows-invoker",
                project=project,
                role="roles/workflows.invoker",
                member=runtime_account.email.apply(lambda email: f"serviceAccount:{email}"),
                opts=child,
            )

        # Private source: code changes produce a new object name, hence a new generation and a
        # new function revision; unchanged code produces no diff at all.
        bucket = gcp.storage.Bucket(
            f"{name}-source",
            project=project,
            location=region,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=True,
            opts=after("storage.googleapis.com"),
        )
        source_object = gcp.storage.BucketObject(
            f"{name}-source-zip",
            bucket=bucket.name,
            name=f"function-{source_hash(function_dir)[:32]}.zip",
            source=source_archive(function_dir),
            content_type="application/zip",
            opts=child,
        )

        # Both functions (the dedup handler, and the token check when deployed) build from it.
        source: gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgsDict = {
            "storage_source": {
                "bucket": bucket.name,
                "object": source_object.name,
                "generation": source_object.generation,
            }
        }

        # The build's own identity. Left unset, Cloud Build runs as the default compute
        # account (Editor on the project) in new projects. This one may write build logs,
        # push to this stack's image repository and read this stack's source bucket: nothing else.
        builder_account = gcp.serviceaccount.Account(
            f"{name}-builder",
            project=project,
            account_id=_account_id(name, "builder"),
            display_name="Exactly-once scheduler: function builds",
            description="Builds the functions: writes logs, pushes to one repository, reads one bucket.",
            opts=after("iam.googleapis.com"),
        )
        builder_member = builder_account.email.apply(lambda email: f"serviceAccount:{email}")
        repository = gcp.artifactregistry.Repository(
            f"{name}-images",
            project=project,
            location=region,
            repository_id=f"{name}-functions",
            format="DOCKER",
            description="Images of the exactly-once scheduler's functions.",
            opts=after("artifactregistry.googleapis.com"),
        )
        build_grants = [
            # Build logs have no narrower IAM resource than the project (allow-listed for this
            # account only).
            gcp.projects.IAMMember(
                f"{name}-builder-log-writer",
                project=project,
                role="roles/logging.logWriter",
                member=builder_member,
                opts=child,
            ),
            gcp.artifactregistry.RepositoryIamMember(
                f"{name}-builder-images-writer",
                project=project,
                location=region,
                repository=repository.repository_id,
                role="roles/artifactregistry.writer",
                member=builder_member,
                opts=child,
            ),
            gcp.storage.BucketIAMMember(
                f"{name}-builder-source-viewer",
                bucket=bucket.name,
                role="roles/storage.objectViewer",
                member=builder_member,
                opts=child,
            ),
        ]
        docker_repository = pulumi.Output.all(
            repository.project, repository.location, repository.repository_id
        ).apply(lambda parts: "projects/{}/locations/{}/repositories/{}".format(*parts))

        def build_config(entry_point: str) -> gcp.cloudfunctionsv2.FunctionBuildConfigArgsDict:
            return {
                "runtime": FUNCTION_RUNTIME,
                "entry_point": entry_point,
                "source": source,
                # The full resource name, as the API takes it (an email alone is rejected).
                "service_account": builder_account.name,
                "docker_repository": docker_repository,
            }

        def function_opts() -> pulumi.ResourceOptions:
            # The first build needs the builder's grants in place, not just the account.
            return pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    *(apis[api] for api in FUNCTION_APIS),
                    *build_grants,
                ],
            )

        function = gcp.cloudfunctionsv2.Function(
            f"{name}-function",
            project=project,
            location=region,
            name=f"{name}-handler",
            description="Deduplicates Cloud Scheduler deliveries: each scheduled run executes once.",
            build_config=build_config(FUNCTION_ENTRY_POINT),
            service_config={
                "service_account_email": runtime_account.email,
                "timeout_seconds": int(settings.function_timeout_seconds),
                "max_instance_count": settings.max_instances,
                "ingress_settings": settings.ingress,
                "all_traffic_on_latest_revision": True,
                "environment_variables": settings.function_environment(),
            },
            opts=function_opts(),
        )
        function_uri = function.service_config.apply(_service_uri)

        # The invoker may call this one Cloud Run service, nothing else in the project.
        invoker_binding = gcp.cloudrunv2.ServiceIamMember(
            f"{name}-invoker-run-invoker",
            project=project,
            location=region,
            name=function.service_config.apply(_service_name),
            role="roles/run.invoker",
            member=invoker_account.email.apply(lambda email: f"serviceAccount:{email}"),
            opts=child,
        )

        # Sample workflows (jobs with `workflow: {sample: true}`) and the token check they call.
        token_check_uri: pulumi.Output[str] | None = None
        workflow_account_email: pulumi.Output[str] | None = None
        sample_workflows: dict[str, pulumi.Output[str]] = {}
        if sample_jobs:
            # Token records live in the run ledger's database (the runtime account's condition
            # already covers it) and expire like run records do. Firestore runs one field
            # operation per database at a time, so this TTL waits for the runs TTL.
            gcp.firestore.Field(
                f"{name}-tokens-ttl",
                project=project,
                database=database.name,
                collection=settings.idempotency_collection,
                field=TTL_FIELD,
                ttl_config={},
                index_config={},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[runs_ttl]),
            )
            token_check = gcp.cloudfunctionsv2.Function(
                f"{name}-token-check",
                project=project,
                location=region,
                name=f"{name}-token-check",
                description="Idempotency token check: lets a workflow run its state-changing step once.",
                build_config=build_config(TOKEN_CHECK_ENTRY_POINT),
                service_config={
                    "service_account_email": runtime_account.email,
                    "timeout_seconds": TOKEN_CHECK_TIMEOUT_SECONDS,
                    "max_instance_count": settings.max_instances,
                    # Only workflows of this project call it, and they count as internal.
                    "ingress_settings": "ALLOW_INTERNAL_ONLY",
                    "all_traffic_on_latest_revision": True,
                    "environment_variables": settings.token_check_environment(),
                },
                opts=function_opts(),
            )
            token_check_uri = token_check.service_config.apply(_service_uri)
            # One identity for every sample workflow: it may invoke the token check, nothing else.
            workflow_account = gcp.serviceaccount.Account(
                f"{name}-workflow",
                project=project,
                account_id=_account_id(name, "workflow"),
                display_name="Exactly-once scheduler: sample workflows",
                description="Runs the sample workflows; may invoke only the token-check function.",
                opts=after("iam.googleapis.com"),
            )
            workflow_account_email = workflow_account.email
            token_check_binding = gcp.cloudrunv2.ServiceIamMember(
                f"{name}-workflow-run-invoker",
                project=project,
                location=region,
                name=token_check.service_config.apply(_service_name),
                role="roles/run.invoker",
                member=workflow_account.email.apply(lambda email: f"serviceAccount:{email}"),
                opts=child,
            )
            workflow_source = SAMPLE_WORKFLOW_FILE.read_text(encoding="utf-8")
            for job in sample_jobs:
                workflow = gcp.workflows.Workflow(
                    f"{name}-workflow-{job.name}",
                    project=project,
                    region=region,
                    name=_workflow_name(name, job.name),
                    description=f"Sample workflow of job {job.name}: token check, then its one state change.",
                    service_account=workflow_account.name,
                    source_contents=workflow_source,
                    user_env_vars={"TOKEN_CHECK_URL": token_check_uri},
                    # It holds no data, and protection would block renames and `pulumi destroy`.
                    deletion_protection=False,
                    opts=pulumi.ResourceOptions(
                        parent=self, depends_on=[apis[WORKFLOWS_API], token_check_binding]
                    ),
                )
                sample_workflows[job.name] = pulumi.Output.all(
                    workflow.project, workflow.region, workflow.name
                ).apply(lambda parts: "projects/{}/locations/{}/workflows/{}".format(*parts))

        jobs = [
            _scheduler_job(
                name,
                job,
                settings,
                function_uri,
                invoker_account.email,
                pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[apis["cloudscheduler.googleapis.com"], invoker_binding],
                ),
                sample_workflows.get(job.name),
            )
            for job in settings.jobs
        ]

        self.function_uri = function_uri
        self.job_names = pulumi.Output.all(*[job.name for job in jobs]).apply(list)
        self.runtime_service_account_email = runtime_account.email
        self.invoker_service_account_email = invoker_account.email
        self.build_service_account_email = builder_account.email
        self.database_name = database.name
        self.runs_collection = pulumi.Output.from_input(settings.runs_collection)
        self.token_check_uri = token_check_uri
        self.workflow_service_account_email = workflow_account_email
        self.sample_workflows = pulumi.Output.all(**sample_workflows).apply(dict)
        outputs: dict[str, pulumi.Input[object]] = {
            "functionUri": self.function_uri,
            "jobNames": self.job_names,
            "runtimeServiceAccountEmail": self.runtime_service_account_email,
            "invokerServiceAccountEmail": self.invoker_service_account_email,
            "buildServiceAccountEmail": self.build_service_account_email,
            "databaseName": self.database_name,
            "runsCollection": self.runs_collection,
        }
        if token_check_uri is not None and workflow_account_email is not None:
            outputs["tokenCheckUri"] = token_check_uri
            outputs["workflowServiceAccountEmail"] = workflow_account_email
            outputs["sampleWorkflows"] = self.sample_workflows
        self.register_outputs(outputs)


def _scheduler_job(
    prefix: str,
    job: JobSettings,
    settings: StackSettings,
    function_uri: pulumi.Output[str],
    invoker_email: pulumi.Output[str],
    opts: pulumi.ResourceOptions,
    sample_workflow: pulumi.Output[str] | None = None,
) -> gcp.cloudscheduler.Job:
    """One Cloud Scheduler job: unix-cron, OIDC-authenticated POST to the function.

    A job with a sample workflow names it in its body, which is therefore an Output.
    """
    retry = job.retry
    body: pulumi.Input[str] | None
    if sample_workflow is not None:
        body = sample_workflow.apply(lambda workflow: _encoded(job.body_bytes(workflow)))
    else:
        raw = job.body_bytes()
        body = _encoded(raw) if raw is not None else None
    return gcp.cloudscheduler.Job(
        f"{prefix}-job-{job.name}",
        project=settings.project,
        region=settings.region,
        name=job.name,
        description=f"Exactly-once scheduled job {job.name}",
        schedule=job.schedule,
        time_zone=job.time_zone,
        attempt_deadline=duration(job.attempt_deadline_seconds),
        retry_config={
            "retry_count": retry.retry_count,
            "max_retry_duration": duration(retry.max_retry_duration_seconds),
            "min_backoff_duration": duration(retry.min_backoff_seconds),
            "max_backoff_duration": duration(retry.max_backoff_seconds),
            "max_doublings": retry.max_doublings,
        },
        http_target={
            "http_method": "POST",
            "uri": function_uri,
            "headers": settings.headers_for(job),
            "body": body,
            "oidc_token": {"service_account_email": invoker_email, "audience": function_uri},
        },
        opts=opts,
    )


def _encoded(body: bytes | None) -> str:
    """The body as the Cloud Scheduler API takes it: base64."""
    if body is None:
        raise ValueError("a job with a sample workflow has a body once the workflow is named")
    return base64.b64encode(body).decode()


def _workflow_name(prefix: str, job_name: str) -> str:
    """A workflow id (letters, digits, '-', '_'; at most 64) unique to component and job."""
    workflow = f"{prefix}-{job_name}"
    if len(workflow) <= WORKFLOW_NAME_MAX:
        return workflow
    tag = hashlib.sha256(workflow.encode()).hexdigest()[:8]
    return f"{workflow[: WORKFLOW_NAME_MAX - len(tag) - 1]}-{tag}"


def duration(seconds: float) -> str:
    """A protobuf Duration string as Cloud Scheduler takes it ("60s", "0.5s")."""
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds:.9g}s"


def _account_id(prefix: str, role: str) -> str:
    """A service account id (6-30 chars) unique to this component name."""
    account_id = f"{prefix}-{role}"
    if len(account_id) <= 30:
        return account_id
    tag = hashlib.sha256(prefix.encode()).hexdigest()[:6]
    return f"{prefix[: 30 - len(role) - len(tag) - 2]}-{tag}-{role}"


def _service_uri(config: gcp.cloudfunctionsv2.outputs.FunctionServiceConfig | None) -> str:
    if config is None or not config.uri:
        raise ValueError("the function reported no service URI")
    return config.uri


def _service_name(config: gcp.cloudfunctionsv2.outputs.FunctionServiceConfig | None) -> str:
    if config is None or not config.service:
        raise ValueError("the function reported no Cloud Run service")
    return config.service
