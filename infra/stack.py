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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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


# What one step of `ExactlyOnceScheduler.__init__` hands to the next.
_Apis = Mapping[str, gcp.projects.Service]


class _RunLedger(NamedTuple):
    database: gcp.firestore.Database
    runs_ttl: gcp.firestore.Field


class _Identities(NamedTuple):
    runtime: gcp.serviceaccount.Account
    invoker: gcp.serviceaccount.Account


class _Source(NamedTuple):
    bucket: gcp.storage.Bucket
    build_source: gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgsDict


@dataclass(frozen=True)
class _BuildIdentity:
    """Who builds the functions, from which source, into which repository."""

    account: gcp.serviceaccount.Account
    source: gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgsDict
    docker_repository: pulumi.Output[str]
    grants: tuple[pulumi.Resource, ...]

    def config(self, entry_point: str) -> gcp.cloudfunctionsv2.FunctionBuildConfigArgsDict:
        return {
            "runtime": FUNCTION_RUNTIME,
            "entry_point": entry_point,
            "source": self.source,
            # The full resource name, as the API takes it (an email alone is rejected).
            "service_account": self.account.name,
            "docker_repository": self.docker_repository,
        }


class _SampleWorkflows(NamedTuple):
    token_check_uri: pulumi.Output[str]
    workflow_account_email: pulumi.Output[str]
    workflows: dict[str, pulumi.Output[str]]


class ExactlyOnceScheduler(pulumi.ComponentResource):
    """Cloud Scheduler jobs → private Cloud Run function → Firestore run ledger."""

    function_uri: pulumi.Output[str]
    job_names: pulumi.Output[list[str]]
    runtime_service_account_email: pulumi.Output[str]
    invoker_service_account_email: pulumi.Output[str]
    build_service_account_email: pulumi.Output[str]
    database_name: pulumi.Output[str]
    runs_collection: pulumi.Output[str]
    # Only with a sample workflow (else None / {}): the token check and the workflows.
    token_check_uri: pulumi.Output[str] | None
    workflow_service_account_email: pulumi.Output[str] | None
    sample_workflows: pulumi.Output[dict[str, str]]

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
        for advisory in settings.timing_advisories():
            pulumi.log.warn(advisory, resource=self)

        apis = self._enable_apis(name, settings)
        ledger = self._run_ledger(name, settings, apis)
        identities = self._identities(name, settings, apis)
        source = self._source(name, settings, apis, function_dir)
        build = self._build_identity(name, settings, apis, source)
        function = self._dedup_function(name, settings, apis, build, identities.runtime)
        function_uri = function.service_config.apply(_service_uri)
        invoker_binding = self._invoker_binding(name, settings, function, identities.invoker)
        samples = self._sample_workflows(name, settings, apis, ledger, identities.runtime, build)
        jobs = self._scheduler_jobs(
            name, settings, apis, function_uri, identities.invoker, invoker_binding, samples
        )
        self._publish_outputs(
            settings, function_uri, jobs, identities, build.account, ledger.database, samples
        )

    # --- resource options shared by the steps ---------------------------------------------------

    def _child(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self)

    def _after(self, apis: _Apis, *names: str) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, depends_on=[apis[api] for api in names])

    def _function_opts(self, apis: _Apis, build: _BuildIdentity) -> pulumi.ResourceOptions:
        # The first build needs the builder's grants in place, not just the account.
        return pulumi.ResourceOptions(
            parent=self,
            depends_on=[
                *(apis[api] for api in FUNCTION_APIS),
                *build.grants,
            ],
        )

    # --- the architecture, in the order __init__ declares it ------------------------------------

    def _enable_apis(self, name: str, settings: StackSettings) -> _Apis:
        uses_workflows = settings.uses_workflows()
        return {
            api: gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                project=settings.project,
                service=api,
                disable_on_destroy=False,
                opts=self._child(),
            )
            for api in REQUIRED_APIS + ((WORKFLOWS_API,) if uses_workflows else ())
        }

    def _run_ledger(self, name: str, settings: StackSettings, apis: _Apis) -> _RunLedger:
        # The run ledger. Deletion protection guards the records that make retries idempotent.
        database = gcp.firestore.Database(
            f"{name}-database",
            project=settings.project,
            name=settings.database_name,
            location_id=settings.region,
            type="FIRESTORE_NATIVE",
            delete_protection_state=(
                "DELETE_PROTECTION_ENABLED" if settings.deletion_protection else "DELETE_PROTECTION_DISABLED"
            ),
            deletion_policy="ABANDON" if settings.deletion_protection else "DELETE",
            opts=self._after(apis, "firestore.googleapis.com"),
        )
        # One TTL policy for every job: expired run records are deleted by Firestore, and the
        # field is exempt from indexing (it is only ever written, never queried).
        runs_ttl = gcp.firestore.Field(
            f"{name}-runs-ttl",
            project=settings.project,
            database=database.name,
            collection=settings.runs_collection,
            field=TTL_FIELD,
            ttl_config={},
            index_config={},
            opts=self._child(),
        )
        return _RunLedger(database=database, runs_ttl=runs_ttl)

    def _identities(self, name: str, settings: StackSettings, apis: _Apis) -> _Identities:
        project = settings.project
        # Two identities, so the scheduler can only invoke and the function can only use Firestore.
        runtime_account = gcp.serviceaccount.Account(
            f"{name}-runtime",
            project=project,
            account_id=_account_id(name, "runtime"),
            display_name="Exactly-once scheduler: function runtime",
            description="Runs the dedup function; Firestore access limited to one database.",
            opts=self._after(apis, "iam.googleapis.com"),
        )
        invoker_account = gcp.serviceaccount.Account(
            f"{name}-invoker",
            project=project,
            account_id=_account_id(name, "invoker"),
            display_name="Exactly-once scheduler: job invoker",
            description="Signs Cloud Scheduler's OIDC tokens; may invoke only the dedup function.",
            opts=self._after(apis, "iam.googleapis.com"),
        )
        database_resource = f"projects/{project}/databases/{settings.database_name}"
        gcp.projects.IAMMember(
            f"{name}-runtime-datastore-user",
            project=project,
            role="roles/datastore.user",
            member=runtime_account.member,
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
            opts=self._child(),
        )
        if settings.uses_workflows():
            # Workflows has no per-workflow IAM resource, so starting executions needs a
            # project-level grant; only made when some job goes through the Workflows proxy.
            # The policy pack allows exactly this role for exactly this account.
            gcp.projects.IAMMember(
                f"{name}-runtime-workflows-invoker",
                project=project,
                role="roles/workflows.invoker",
                member=runtime_account.member,
                opts=self._child(),
            )
        return _Identities(runtime=runtime_account, invoker=invoker_account)

    def _source(self, name: str, settings: StackSettings, apis: _Apis, function_dir: Path) -> _Source:
        # Private source: code changes produce a new object name, hence a new generation and a
        # new function revision; unchanged code produces no diff at all.
        bucket = gcp.storage.Bucket(
            f"{name}-source",
            project=settings.project,
            location=settings.region,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=True,
            opts=self._after(apis, "storage.googleapis.com"),
        )
        source_object = gcp.storage.BucketObject(
            f"{name}-source-zip",
            bucket=bucket.name,
            name=f"function-{source_hash(function_dir)[:32]}.zip",
            source=source_archive(function_dir),
            content_type="application/zip",
            opts=self._child(),
        )
        # Both functions (the dedup handler, and the token check when deployed) build from it.
        build_source: gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgsDict = {
            "storage_source": {
                "bucket": bucket.name,
                "object": source_object.name,
                "generation": source_object.generation,
            }
        }
        return _Source(bucket=bucket, build_source=build_source)

    def _build_identity(
        self, name: str, settings: StackSettings, apis: _Apis, source: _Source
    ) -> _BuildIdentity:
        project, region = settings.project, settings.region
        # The build's own identity. Left unset, Cloud Build runs as the default compute
        # account (Editor on the project) in new projects. This one may write build logs,
        # push to this stack's image repository and read this stack's source bucket: nothing else.
        builder_account = gcp.serviceaccount.Account(
            f"{name}-builder",
            project=project,
            account_id=_account_id(name, "builder"),
            display_name="Exactly-once scheduler: function builds",
            description="Builds the functions: writes logs, pushes to one repository, reads one bucket.",
            opts=self._after(apis, "iam.googleapis.com"),
        )
        repository = gcp.artifactregistry.Repository(
            f"{name}-images",
            project=project,
            location=region,
            repository_id=f"{name}-functions",
            format="DOCKER",
            description="Images of the exactly-once scheduler's functions.",
            opts=self._after(apis, "artifactregistry.googleapis.com"),
        )
        build_grants = (
            # Build logs have no narrower IAM resource than the project (allow-listed for this
            # account only).
            gcp.projects.IAMMember(
                f"{name}-builder-log-writer",
                project=project,
                role="roles/logging.logWriter",
                member=builder_account.member,
                opts=self._child(),
            ),
            gcp.artifactregistry.RepositoryIamMember(
                f"{name}-builder-images-writer",
                project=project,
                location=region,
                repository=repository.repository_id,
                role="roles/artifactregistry.writer",
                member=builder_account.member,
                opts=self._child(),
            ),
            gcp.storage.BucketIAMMember(
                f"{name}-builder-source-viewer",
                bucket=source.bucket.name,
                role="roles/storage.objectViewer",
                member=builder_account.member,
                opts=self._child(),
            ),
        )
        docker_repository = pulumi.Output.all(
            repository.project, repository.location, repository.repository_id
        ).apply(lambda parts: "projects/{}/locations/{}/repositories/{}".format(*parts))
        return _BuildIdentity(
            account=builder_account,
            source=source.build_source,
            docker_repository=docker_repository,
            grants=build_grants,
        )

    def _dedup_function(
        self,
        name: str,
        settings: StackSettings,
        apis: _Apis,
        build: _BuildIdentity,
        runtime_account: gcp.serviceaccount.Account,
    ) -> gcp.cloudfunctionsv2.Function:
        return gcp.cloudfunctionsv2.Function(
            f"{name}-function",
            project=settings.project,
            location=settings.region,
            name=f"{name}-handler",
            description="Deduplicates Cloud Scheduler deliveries: each scheduled run executes once.",
            build_config=build.config(FUNCTION_ENTRY_POINT),
            service_config={
                "service_account_email": runtime_account.email,
                "timeout_seconds": int(settings.function_timeout_seconds),
                "max_instance_count": settings.max_instances,
                "ingress_settings": settings.ingress,
                "all_traffic_on_latest_revision": True,
                "environment_variables": settings.function_environment(),
            },
            opts=self._function_opts(apis, build),
        )

    def _invoker_binding(
        self,
        name: str,
        settings: StackSettings,
        function: gcp.cloudfunctionsv2.Function,
        invoker_account: gcp.serviceaccount.Account,
    ) -> gcp.cloudrunv2.ServiceIamMember:
        # The invoker may call this one Cloud Run service, nothing else in the project.
        return gcp.cloudrunv2.ServiceIamMember(
            f"{name}-invoker-run-invoker",
            project=settings.project,
            location=settings.region,
            name=function.service_config.apply(_service_name),
            role="roles/run.invoker",
            member=invoker_account.member,
            opts=self._child(),
        )

    def _sample_workflows(
        self,
        name: str,
        settings: StackSettings,
        apis: _Apis,
        ledger: _RunLedger,
        runtime_account: gcp.serviceaccount.Account,
        build: _BuildIdentity,
    ) -> _SampleWorkflows | None:
        """Sample workflows (jobs with `workflow: {sample: true}`) and the token check they call."""
        sample_jobs = settings.sample_workflow_jobs()
        if not sample_jobs:
            return None
        project, region = settings.project, settings.region
        # Token records live in the run ledger's database (the runtime account's condition
        # already covers it) and expire like run records do. Firestore runs one field
        # operation per database at a time, so this TTL waits for the runs TTL.
        gcp.firestore.Field(
            f"{name}-tokens-ttl",
            project=project,
            database=ledger.database.name,
            collection=settings.idempotency_collection,
            field=TTL_FIELD,
            ttl_config={},
            index_config={},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ledger.runs_ttl]),
        )
        token_check = gcp.cloudfunctionsv2.Function(
            f"{name}-token-check",
            project=project,
            location=region,
            name=f"{name}-token-check",
            description="Idempotency token check: lets a workflow run its state-changing step once.",
            build_config=build.config(TOKEN_CHECK_ENTRY_POINT),
            service_config={
                "service_account_email": runtime_account.email,
                "timeout_seconds": TOKEN_CHECK_TIMEOUT_SECONDS,
                "max_instance_count": settings.max_instances,
                # Only workflows of this project call it, and they count as internal.
                "ingress_settings": "ALLOW_INTERNAL_ONLY",
                "all_traffic_on_latest_revision": True,
                "environment_variables": settings.token_check_environment(),
            },
            opts=self._function_opts(apis, build),
        )
        token_check_uri = token_check.service_config.apply(_service_uri)
        # One identity for every sample workflow: it may invoke the token check, nothing else.
        workflow_account = gcp.serviceaccount.Account(
            f"{name}-workflow",
            project=project,
            account_id=_account_id(name, "workflow"),
            display_name="Exactly-once scheduler: sample workflows",
            description="Runs the sample workflows; may invoke only the token-check function.",
            opts=self._after(apis, "iam.googleapis.com"),
        )
        token_check_binding = gcp.cloudrunv2.ServiceIamMember(
            f"{name}-workflow-run-invoker",
            project=project,
            location=region,
            name=token_check.service_config.apply(_service_name),
            role="roles/run.invoker",
            member=workflow_account.member,
            opts=self._child(),
        )
        workflow_source = SAMPLE_WORKFLOW_FILE.read_text(encoding="utf-8")
        workflows: dict[str, pulumi.Output[str]] = {}
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
            workflows[job.name] = pulumi.Output.all(workflow.project, workflow.region, workflow.name).apply(
                lambda parts: "projects/{}/locations/{}/workflows/{}".format(*parts)
            )
        return _SampleWorkflows(
            token_check_uri=token_check_uri,
            workflow_account_email=workflow_account.email,
            workflows=workflows,
        )

    def _scheduler_jobs(
        self,
        name: str,
        settings: StackSettings,
        apis: _Apis,
        function_uri: pulumi.Output[str],
        invoker_account: gcp.serviceaccount.Account,
        invoker_binding: gcp.cloudrunv2.ServiceIamMember,
        samples: _SampleWorkflows | None,
    ) -> list[gcp.cloudscheduler.Job]:
        sample_workflows = samples.workflows if samples is not None else {}
        return [
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

    def _publish_outputs(
        self,
        settings: StackSettings,
        function_uri: pulumi.Output[str],
        jobs: list[gcp.cloudscheduler.Job],
        identities: _Identities,
        builder_account: gcp.serviceaccount.Account,
        database: gcp.firestore.Database,
        samples: _SampleWorkflows | None,
    ) -> None:
        sample_workflows = samples.workflows if samples is not None else {}
        self.function_uri = function_uri
        self.job_names = pulumi.Output.all(*[job.name for job in jobs]).apply(list)
        self.runtime_service_account_email = identities.runtime.email
        self.invoker_service_account_email = identities.invoker.email
        self.build_service_account_email = builder_account.email
        self.database_name = database.name
        self.runs_collection = pulumi.Output.from_input(settings.runs_collection)
        self.token_check_uri = samples.token_check_uri if samples is not None else None
        self.workflow_service_account_email = samples.workflow_account_email if samples is not None else None
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
        if samples is not None:
            outputs["tokenCheckUri"] = samples.token_check_uri
            outputs["workflowServiceAccountEmail"] = samples.workflow_account_email
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
