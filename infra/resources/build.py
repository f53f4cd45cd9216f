"""The functions' source and build: a private source bucket, the build's own account, its grants.

How a Cloud Run function is built: `pulumi up` uploads the zip to the stack's private bucket;
Cloud Functions (its service agent) copies it to the regional bucket
`gcf-v2-sources-<PROJECT_NUMBER>-<region>`, which it creates on the first deploy in that region;
Cloud Build fetches it from there as the build account, builds an image, and pushes it to the
stack's Artifact Registry repository. So the build account needs exactly: write logs, push to one
repository, read the gcf-v2-sources bucket. It never reads the stack's own bucket.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pulumi
import pulumi_gcp as gcp
import pulumiverse_time as time

from exactly_once.config import JOB_TABLE_FILE
from infra.resources.identities import service_account
from infra.resources.propagation import BUILD_GRANTS, pause_after
from infra.resources.regions import regional_prefix
from infra.resources.source import source_archive, source_hash
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.grants import BUILD_IMAGES, BUILD_LOGS, BUILD_SOURCES, Account

FUNCTION_RUNTIME = "python312"


# Every change of a job's settings rebuilds the function (its job table ships in the source), so
# images pile up: those older than IMAGE_MAX_AGE go, but never the IMAGES_KEPT newest, which a
# rollback to an earlier revision needs (a KEEP policy wins over a DELETE one).
IMAGES_KEPT = 10
IMAGE_MAX_AGE = timedelta(days=30)
IMAGE_CLEANUP = [
    gcp.artifactregistry.RepositoryCleanupPolicyArgs(
        id="keep-newest",
        action="KEEP",
        most_recent_versions=gcp.artifactregistry.RepositoryCleanupPolicyMostRecentVersionsArgs(
            keep_count=IMAGES_KEPT
        ),
    ),
    gcp.artifactregistry.RepositoryCleanupPolicyArgs(
        id="delete-old",
        action="DELETE",
        condition=gcp.artifactregistry.RepositoryCleanupPolicyConditionArgs(
            tag_state="ANY", older_than=f"{int(IMAGE_MAX_AGE.total_seconds())}s"
        ),
    ),
]


def sources_bucket(project_number: str, region: str) -> str:
    """The bucket Cloud Functions copies each uploaded source to before Cloud Build reads it."""
    return f"gcf-v2-sources-{project_number}-{region}"


def sources_read_condition(project_number: str, region: str) -> gcp.projects.IAMMemberConditionArgsDict:
    """Object read limited to the gcf-v2-sources bucket of this region: the bucket does not
    exist before the first deploy, so the grant cannot sit on the bucket itself."""
    bucket = f"projects/_/buckets/{sources_bucket(project_number, region)}"
    return {
        "title": f"only-gcf-v2-sources-{region}"[:100],
        "description": "Cloud Build reads the function sources Cloud Functions copied here; nothing else.",
        # The bucket or its objects; a mere prefix would also match `<bucket>-other` buckets.
        "expression": f'resource.name == "{bucket}" || resource.name.startsWith("{bucket}/")',
    }


def _sources_condition(number: object, *, region: str) -> gcp.projects.IAMMemberConditionArgsDict:
    return sources_read_condition(str(number), region)


@dataclass(frozen=True)
class BuildIdentity:
    """Who builds the functions, from which source, into which repository, and what a function
    must wait for before its first build."""

    account: gcp.serviceaccount.Account
    source: gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgsDict
    # One repository per region the stack deploys functions in, by region: a function's
    # build pushes to its own region's, so building one region never needs the other.
    docker_repositories: Mapping[str, pulumi.Output[str]]
    ready: time.Sleep

    @property
    def docker_repository(self) -> pulumi.Output[str]:
        """The repository of the stack's first region."""
        return next(iter(self.docker_repositories.values()))

    def config(
        self, entry_point: str, region: str | None = None
    ) -> gcp.cloudfunctionsv2.FunctionBuildConfigArgsDict:
        """The build of a function in `region` (None: the stack's first region)."""
        repository = self.docker_repositories[region] if region is not None else self.docker_repository
        return {
            "runtime": FUNCTION_RUNTIME,
            "entry_point": entry_point,
            "source": self.source,
            # The full resource name, as the API takes it (an email alone is rejected).
            "service_account": self.account.name,
            "docker_repository": repository,
        }


def function_source(
    name: str,
    settings: StackSettings,
    function_dir: Path,
    opts: pulumi.ResourceOptions,
    table: pulumi.Input[str],
) -> gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgsDict:
    """The private source bucket and the content-hashed zip both functions build from, with the
    job table (`table`, exactly_once.config.JobTable's JSON) as JOB_TABLE_FILE: a change to a
    job's policy changes the hash, so it deploys like a change of code."""
    # Code changes produce a new object name, hence a new generation and a new function
    # revision; unchanged code produces no diff at all. The bucket name is Pulumi's auto-name
    # (logical name + random suffix): globally unique, so stacks never share it.
    bucket = gcp.storage.Bucket(
        f"{name}-source",
        project=settings.project,
        location=settings.region,
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        force_destroy=True,
        opts=opts,
    )
    source_object = gcp.storage.BucketObject(
        f"{name}-source-zip",
        bucket=bucket.name,
        name=pulumi.Output.from_input(table).apply(
            lambda text: f"function-{source_hash(function_dir, {JOB_TABLE_FILE: text})[:32]}.zip"
        ),
        source=pulumi.Output.from_input(table).apply(
            lambda text: source_archive(function_dir, {JOB_TABLE_FILE: text})
        ),
        content_type="application/zip",
        opts=pulumi.ResourceOptions(parent=opts.parent),
    )
    return {
        "storage_source": {
            "bucket": bucket.name,
            "object": source_object.name,
            "generation": source_object.generation,
        }
    }


def build_identity(
    name: str,
    settings: StackSettings,
    source: gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgsDict,
    *,
    parent: pulumi.Resource,
    iam_api: pulumi.Resource,
    registry_api: pulumi.Resource,
    build_apis: list[pulumi.Resource],
) -> BuildIdentity:
    """The build's own identity and exactly the grants a build uses.

    Left unset, Cloud Build runs as the default compute account (Editor on the project) in new
    projects; the policy pack refuses that.
    """
    project = settings.project
    child = pulumi.ResourceOptions(parent=parent)
    account = service_account(
        name,
        Account.BUILDER,
        "function builds",
        "Builds the functions: writes logs, pushes to one repository, reads the sources.",
        settings,
        pulumi.ResourceOptions(parent=parent, depends_on=[iam_api]),
    )
    project_number = gcp.organizations.get_project_output(project_id=project).number
    grants: list[pulumi.Resource] = [
        # Build logs have no narrower IAM resource than the project (allow-listed for this
        # account only).
        gcp.projects.IAMMember(
            f"{name}-builder-log-writer",
            project=project,
            role=BUILD_LOGS.role,
            member=account.member,
            opts=child,
        ),
    ]
    repositories: dict[str, pulumi.Output[str]] = {}
    for region in settings.regions:
        prefix = regional_prefix(name, settings, region)
        repository = gcp.artifactregistry.Repository(
            f"{prefix}-images",
            project=project,
            location=region,
            repository_id=settings.names.repository_id(),
            format="DOCKER",
            description="Images of the exactly-once scheduler's functions.",
            cleanup_policies=IMAGE_CLEANUP,
            cleanup_policy_dry_run=False,
            # With deletionProtection, Pulumi refuses a plan that would delete or replace it:
            # its id is fixed, so a replacement would meet 409 "already exists".
            opts=pulumi.ResourceOptions(
                parent=parent, depends_on=[registry_api], protect=settings.deletion_protection
            ),
        )
        grants.append(
            gcp.artifactregistry.RepositoryIamMember(
                f"{prefix}-builder-images-writer",
                project=project,
                location=region,
                repository=repository.repository_id,
                role=BUILD_IMAGES.role,
                member=account.member,
                opts=child,
            )
        )
        # Allow-listed for this account and this condition only (policy pack).
        grants.append(
            gcp.projects.IAMMember(
                f"{prefix}-builder-sources-viewer",
                project=project,
                role=BUILD_SOURCES.role,
                member=account.member,
                condition=project_number.apply(functools.partial(_sources_condition, region=region)),
                opts=child,
            )
        )
        repositories[region] = pulumi.Output.all(
            repository.project, repository.location, repository.repository_id
        ).apply(lambda parts: "projects/{}/locations/{}/repositories/{}".format(*parts))
    # Also after the APIs a build uses: enabling one creates its service agents (Cloud Build's,
    # Cloud Functions') in the background, and a build that starts first fails the same way.
    # A new build account (new grants) sleeps again; see infra/resources/propagation.py for the length.
    ready = pause_after(
        name,
        BUILD_GRANTS,
        after=[*grants, *build_apis],
        triggers={"builder": account.member},
        opts=child,
    )
    return BuildIdentity(account=account, source=source, docker_repositories=repositories, ready=ready)
