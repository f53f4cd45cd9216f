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
TTL_FIELD = "expire_at"

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

        apis = {
            api: gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                project=project,
                service=api,
                disable_on_destroy=False,
                opts=child,
            )
            for api in REQUIRED_APIS
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
        gcp.firestore.Field(
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

        function = gcp.cloudfunctionsv2.Function(
            f"{name}-function",
            project=project,
            location=region,
            name=f"{name}-handler",
            description="Deduplicates Cloud Scheduler deliveries: each scheduled run executes once.",
            build_config={
                "runtime": FUNCTION_RUNTIME,
                "entry_point": FUNCTION_ENTRY_POINT,
                "source": {
                    "storage_source": {
                        "bucket": bucket.name,
                        "object": source_object.name,
                        "generation": source_object.generation,
                    }
                },
            },
            service_config={
                "service_account_email": runtime_account.email,
                "timeout_seconds": int(settings.function_timeout_seconds),
                "max_instance_count": settings.max_instances,
                "ingress_settings": settings.ingress,
                "all_traffic_on_latest_revision": True,
                "environment_variables": settings.function_environment(),
            },
            opts=after(
                "cloudfunctions.googleapis.com",
                "cloudbuild.googleapis.com",
                "artifactregistry.googleapis.com",
                "run.googleapis.com",
            ),
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
            )
            for job in settings.jobs
        ]

        self.function_uri = function_uri
        self.job_names = pulumi.Output.all(*[job.name for job in jobs]).apply(list)
        self.runtime_service_account_email = runtime_account.email
        self.invoker_service_account_email = invoker_account.email
        self.database_name = database.name
        self.runs_collection = pulumi.Output.from_input(settings.runs_collection)
        self.register_outputs(
            {
                "functionUri": self.function_uri,
                "jobNames": self.job_names,
                "runtimeServiceAccountEmail": self.runtime_service_account_email,
                "invokerServiceAccountEmail": self.invoker_service_account_email,
                "databaseName": self.database_name,
                "runsCollection": self.runs_collection,
            }
        )


def _scheduler_job(
    prefix: str,
    job: JobSettings,
    settings: StackSettings,
    function_uri: pulumi.Output[str],
    invoker_email: pulumi.Output[str],
    opts: pulumi.ResourceOptions,
) -> gcp.cloudscheduler.Job:
    """One Cloud Scheduler job: unix-cron, OIDC-authenticated POST to the function."""
    retry = job.retry
    body = job.body_bytes()
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
            # The API takes the body base64-encoded.
            "body": base64.b64encode(body).decode() if body is not None else None,
            "oidc_token": {"service_account_email": invoker_email, "audience": function_uri},
        },
        opts=opts,
    )


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
