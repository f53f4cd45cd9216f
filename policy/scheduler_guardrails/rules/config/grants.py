"""Who holds which role on what: every IAM grant the stack gives its own accounts, and every
role of the CI accounts that deploy and preview it, one row each in `GRANTS`.

A row names the account, the role, the scope it is granted on (the project, the project under a
condition naming one database or bucket, or one resource), when it is made (always, when some
job uses a target kind or an option, or when the bootstrap is told to) and why. Everything else
reads these rows instead of spelling a role: the program takes each IAM member's role from its
row (infra/resources/, rules/targets/), the policy pack builds its allow-list of project-wide
roles and their holders from them (identities/allowlist.py), docs/deploy.md's table of
the stack's accounts is rendered from them (`make docs`), the deployer's and the previewer's
role lists (deployer_roles.py) are views of them, and tests/infra/resources/test_grants_table.py
fails when the program makes a grant no row lists, or no longer makes one a row lists.

A row of a target kind names the kind by its config key rather than importing it: the kinds are
an optional part a fork may delete (tools/optional_parts.py), and a row of a kind that is absent
is never made, allowed or shown.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final


class Account(enum.Enum):
    """The accounts that hold roles, as the docs name them. The stack's own, one per job a
    principal does, have ids ending in the key (rules/config/names.py: service_account_id); the
    CI accounts are the bootstrap's (bootstrap/github_deployer.py), named by its config."""

    RUNTIME = ("runtime", "`<prefix>-runtime` (the scheduled function)")
    TOKEN_CHECK = ("tokens", "`<prefix>-tokens` (the token check)")
    INVOKER = ("invoker", "`<prefix>-invoker` (Cloud Scheduler's and Cloud Tasks' OIDC identity)")
    BUILDER = ("builder", "`<prefix>-builder` (Cloud Build)")
    SAMPLE_WORKFLOW = ("workflow", "`<prefix>-workflow` (the sample workflows)")
    SAMPLE_CLOUD_RUN_JOB = ("crjob", "`<prefix>-crjob` (the sample Cloud Run jobs)")
    DEPLOYER = ("deployer", "the CI deployer")
    PREVIEWER = ("previewer", "the CI previewer")

    def __init__(self, key: str, shown: str) -> None:
        self.key = key
        self.shown = shown

    @property
    def of_the_stack(self) -> bool:
        """Whether the stack itself creates the account (the CI accounts are the bootstrap's)."""
        return self not in (Account.DEPLOYER, Account.PREVIEWER)


PROJECT_MEMBER_TYPE: Final = "gcp:projects/iAMMember:IAMMember"
SERVICE_MEMBER_TYPE: Final = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
BUCKET_MEMBER_TYPE: Final = "gcp:storage/bucketIAMMember:BucketIAMMember"


class Scope(enum.Enum):
    """What a role is granted on, as the docs show it, with the Pulumi type of the IAM member
    resource that grants it there (the type a policy sees)."""

    PROJECT = ("the project", PROJECT_MEMBER_TYPE)
    LEDGER_DATABASE = (
        "the project, under a condition naming the run ledger's database and its documents",
        PROJECT_MEMBER_TYPE,
    )
    BUILD_SOURCES = (
        "the project, under a condition naming the bucket `gcf-v2-sources-<number>-<region>` "
        "and its objects (one grant per region)",
        PROJECT_MEMBER_TYPE,
    )
    FUNCTION_SERVICE = (
        "the scheduled function's Cloud Run service (one grant per region)",
        SERVICE_MEMBER_TYPE,
    )
    TOKEN_CHECK_SERVICE = ("the token check's Cloud Run service", SERVICE_MEMBER_TYPE)
    IMAGE_REPOSITORY = (
        "the stack's image repository (one per region)",
        "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
    )
    CATCHUP_QUEUE = (
        "the stack's catch-up queue (one per region)",
        "gcp:cloudtasks/queueIamMember:QueueIamMember",
    )
    INVOKER_ACCOUNT = ("the invoker account", "gcp:serviceaccount/iAMMember:IAMMember")
    CLOUD_RUN_JOB = ("one Cloud Run job", "gcp:cloudrunv2/jobIamMember:JobIamMember")
    CLOUD_RUN_SERVICE = ("one Cloud Run service", SERVICE_MEMBER_TYPE)
    DATASET = ("one BigQuery dataset", "gcp:bigquery/datasetIamMember:DatasetIamMember")
    SECRET = ("one secret", "gcp:secretmanager/secretIamMember:SecretIamMember")
    TOPIC = ("one Pub/Sub topic", "gcp:pubsub/topicIAMMember:TopicIAMMember")
    SUBSCRIPTION = ("one Pub/Sub subscription", "gcp:pubsub/subscriptionIAMMember:SubscriptionIAMMember")
    BUCKET = ("one Cloud Storage bucket", BUCKET_MEMBER_TYPE)
    STATE_BUCKET = ("the Pulumi state bucket", BUCKET_MEMBER_TYPE)
    SECRETS_KEY = ("the stacks' secrets key", "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember")

    def __init__(self, shown: str, resource_type: str) -> None:
        self.shown = shown
        self.resource_type = resource_type

    @property
    def project_wide(self) -> bool:
        """Granted on the project (with or without a condition), not on one resource."""
        return self.resource_type == PROJECT_MEMBER_TYPE


@dataclass(frozen=True)
class When:
    """When a grant is made: `kind`, whenever some job has that target kind's config key (with
    `sample`, only when the stack deploys the kind's sample); `job_grant`, when the bootstrap's
    `jobGrants` lists that kind of resource; otherwise as `shown` says."""

    shown: str
    kind: str | None = None
    sample: bool = False
    job_grant: str | None = None


ALWAYS: Final = When("always")
CATCHUP: Final = When("a job has `catchup`")
SECRETS: Final = When("a job has `secrets`")
JOB_GRANTS: Final = When("a job's `grants` names it")
STATE_BUCKET: Final = When("the bootstrap has `stateBucket`")
SECRETS_KEY: Final = When("the bootstrap has `secretsKeyRing`")


def kind_used(key: str) -> When:
    return When(f"a job has `{key}`", kind=key)


def kind_sample(key: str) -> When:
    return When(f"a job has `{key}: {{sample: true}}`", kind=key, sample=True)


def job_grant(kind: str) -> When:
    return When(f"the bootstrap's `jobGrants` lists `{kind}`", job_grant=kind)


@dataclass(frozen=True)
class Grant:
    """`account` holds `role` on `scope` when any of `when` holds, for the reason `why`."""

    account: Account
    role: str
    scope: Scope
    when: tuple[When, ...]
    why: str

    @property
    def kinds(self) -> tuple[str, ...]:
        """The target kinds (config keys) whose use makes this grant."""
        return tuple(when.kind for when in self.when if when.kind is not None)


# --- the stack's own accounts ---------------------------------------------------------------

RUNTIME_LEDGER: Final = Grant(
    Account.RUNTIME,
    "roles/datastore.user",
    Scope.LEDGER_DATABASE,
    (ALWAYS,),
    "claims and finishes run records; Firestore has no per-database IAM resource",
)
TOKEN_CHECK_LEDGER: Final = Grant(
    Account.TOKEN_CHECK,
    "roles/datastore.user",
    Scope.LEDGER_DATABASE,
    # The samples that call the token check, which the stack deploys for them (the kinds'
    # `sample_calls_token_check`; infra/plan/needs.py: needs_token_check).
    (kind_sample("workflow"), kind_sample("cloudRunJob")),
    "records the tokens it checks in the ledger's database; it never starts anything",
)
INVOKER_CALLS_FUNCTION: Final = Grant(
    Account.INVOKER,
    "roles/run.invoker",
    Scope.FUNCTION_SERVICE,
    (ALWAYS,),
    "Cloud Scheduler (and Cloud Tasks, for a catch-up) calls the function with its OIDC token",
)
WORKFLOW_CALLS_TOKEN_CHECK: Final = Grant(
    Account.SAMPLE_WORKFLOW,
    "roles/run.invoker",
    Scope.TOKEN_CHECK_SERVICE,
    (kind_sample("workflow"),),
    "a sample workflow asks the token check before its state change",
)
SAMPLE_JOB_CALLS_TOKEN_CHECK: Final = Grant(
    Account.SAMPLE_CLOUD_RUN_JOB,
    "roles/run.invoker",
    Scope.TOKEN_CHECK_SERVICE,
    (kind_sample("cloudRunJob"),),
    "a sample Cloud Run job's container asks the token check before its state change",
)
BUILD_LOGS: Final = Grant(
    Account.BUILDER,
    "roles/logging.logWriter",
    Scope.PROJECT,
    (ALWAYS,),
    "writes the functions' build logs; Cloud Logging has no narrower IAM resource for writing "
    "log entries than the project",
)
BUILD_IMAGES: Final = Grant(
    Account.BUILDER,
    "roles/artifactregistry.writer",
    Scope.IMAGE_REPOSITORY,
    (ALWAYS,),
    "pushes the functions' images",
)
BUILD_SOURCES: Final = Grant(
    Account.BUILDER,
    "roles/storage.objectViewer",
    Scope.BUILD_SOURCES,
    (ALWAYS,),
    "fetches the source Cloud Functions copied there; the bucket does not exist before the "
    "first deploy, so the grant cannot sit on it",
)
WORKFLOWS_INVOKER: Final = Grant(
    Account.RUNTIME,
    "roles/workflows.invoker",
    Scope.PROJECT,
    (kind_used("workflow"),),
    "starts executions when a job goes through the Workflows proxy; Workflows has no "
    "per-workflow IAM resource",
)
BIGQUERY_JOB_USER: Final = Grant(
    Account.RUNTIME,
    "roles/bigquery.jobUser",
    Scope.PROJECT,
    (kind_used("bigquery"),),
    "creates query jobs when a job goes through the BigQuery proxy; job creation "
    "(bigquery.jobs.create) has no narrower IAM resource than the project, and the data the "
    "jobs touch is granted per dataset",
)
CLOUD_RUN_JOB_EXECUTOR: Final = Grant(
    Account.RUNTIME,
    "roles/run.jobsExecutorWithOverrides",
    Scope.CLOUD_RUN_JOB,
    (kind_used("cloudRunJob"), JOB_GRANTS),
    "runs the job with the run's overrides, and cancels it (run, runWithOverrides, cancel)",
)
CLOUD_RUN_JOB_VIEWER: Final = Grant(
    Account.RUNTIME,
    "roles/run.viewer",
    Scope.CLOUD_RUN_JOB,
    (kind_used("cloudRunJob"), JOB_GRANTS),
    "finds the run's execution (executions.get, executions.list)",
)
DATASET_READER: Final = Grant(
    Account.RUNTIME,
    "roles/bigquery.dataViewer",
    Scope.DATASET,
    (kind_used("bigquery"), JOB_GRANTS),
    "reads a dataset a BigQuery job reads (`readDatasets`)",
)
DATASET_WRITER: Final = Grant(
    Account.RUNTIME,
    "roles/bigquery.dataEditor",
    Scope.DATASET,
    (kind_used("bigquery"), JOB_GRANTS),
    "writes a dataset a BigQuery job writes (`writeDatasets`, its destination table's, the sample's)",
)
SECRET_ACCESSOR: Final = Grant(
    Account.RUNTIME,
    "roles/secretmanager.secretAccessor",
    Scope.SECRET,
    (SECRETS, JOB_GRANTS),
    "Cloud Run reads the secret into the function's environment when an instance starts",
)
CATCHUP_ENQUEUER: Final = Grant(
    Account.RUNTIME,
    "roles/cloudtasks.enqueuer",
    Scope.CATCHUP_QUEUE,
    (CATCHUP,),
    "the missed-run audit adds the runs it delivers again, to this queue only",
)
CATCHUP_ACTS_AS_INVOKER: Final = Grant(
    Account.RUNTIME,
    "roles/iam.serviceAccountUser",
    Scope.INVOKER_ACCOUNT,
    (CATCHUP,),
    "puts the invoker's OIDC token on a catch-up task, which Cloud Tasks allows only to an "
    "account that may act as the invoker",
)

# What a job's `grants` may ask for besides the rows above (rules/config/access.py: GRANT_KINDS
# takes each kind's roles from here): never admin, owner or IAM-changing roles.
_A_JOB_NEEDS = "a job's own need, on the one resource it names; never an admin, owner or IAM-changing role"
JOB_GRANT_ROLES: Final = (
    Grant(Account.RUNTIME, "roles/run.jobsExecutor", Scope.CLOUD_RUN_JOB, (JOB_GRANTS,), _A_JOB_NEEDS),
    Grant(Account.RUNTIME, "roles/run.invoker", Scope.CLOUD_RUN_SERVICE, (JOB_GRANTS,), _A_JOB_NEEDS),
    *(
        Grant(Account.RUNTIME, role, scope, (JOB_GRANTS,), _A_JOB_NEEDS)
        for scope, roles in (
            (Scope.TOPIC, ("roles/pubsub.publisher", "roles/pubsub.viewer")),
            (Scope.SUBSCRIPTION, ("roles/pubsub.subscriber", "roles/pubsub.viewer")),
            (
                Scope.BUCKET,
                ("roles/storage.objectViewer", "roles/storage.objectCreator", "roles/storage.objectUser"),
            ),
        )
        for role in roles
    ),
)

STACK_GRANTS: Final = (
    RUNTIME_LEDGER,
    WORKFLOWS_INVOKER,
    BIGQUERY_JOB_USER,
    CLOUD_RUN_JOB_EXECUTOR,
    CLOUD_RUN_JOB_VIEWER,
    DATASET_READER,
    DATASET_WRITER,
    SECRET_ACCESSOR,
    CATCHUP_ENQUEUER,
    CATCHUP_ACTS_AS_INVOKER,
    *JOB_GRANT_ROLES,
    TOKEN_CHECK_LEDGER,
    INVOKER_CALLS_FUNCTION,
    WORKFLOW_CALLS_TOKEN_CHECK,
    SAMPLE_JOB_CALLS_TOKEN_CHECK,
    BUILD_LOGS,
    BUILD_IMAGES,
    BUILD_SOURCES,
)


# --- the CI accounts ------------------------------------------------------------------------


def _deployer(role: str, why: str, *when: When) -> Grant:
    return Grant(Account.DEPLOYER, role, Scope.PROJECT, when or (ALWAYS,), why)


DEPLOYER_SECRETS_KEY: Final = Grant(
    Account.DEPLOYER,
    "roles/cloudkms.cryptoKeyEncrypterDecrypter",
    Scope.SECRETS_KEY,
    (SECRETS_KEY,),
    "encrypt and decrypt the stacks' secrets (the KMS secrets provider)",
)
# What `pulumi up` needs on a fresh project, each with its reason (predefined roles only: no
# primitive owner/editor/viewer). A deployer made by hand needs the same: docs/deploy.md lists
# them (deployer_roles.py), bootstrap/ grants exactly these.
DEPLOYER_GRANTS: Final = (
    _deployer("roles/serviceusage.serviceUsageAdmin", "enable the APIs the stack uses on a fresh project"),
    _deployer(
        "roles/browser",
        "read the project number (gcp.organizations.get_project), which names the build's "
        "gcf-v2-sources bucket in its IAM condition",
    ),
    _deployer("roles/iam.serviceAccountAdmin", "create the stack's dedicated service accounts"),
    _deployer(
        "roles/iam.serviceAccountUser",
        "iam.serviceAccounts.actAs on every account the stack runs something as "
        "(function runtime, token check, build, invoker, workflow, sample Cloud Run job)",
    ),
    _deployer(
        "roles/resourcemanager.projectIamAdmin",
        "grant the project-level roles, with IAM conditions, to the stack's own accounts",
    ),
    _deployer("roles/datastore.owner", "create the Firestore database and its TTL field policies"),
    _deployer("roles/storage.admin", "create the private source bucket and upload the source"),
    _deployer(
        "roles/artifactregistry.admin", "create the per-stack image repository and grant the build on it"
    ),
    _deployer("roles/cloudfunctions.admin", "create and update the Cloud Run functions"),
    _deployer(
        "roles/run.admin",
        "grant roles/run.invoker on the functions' Cloud Run services, create the sample Cloud Run jobs "
        "and grant the runtime account on the Cloud Run jobs it runs",
    ),
    _deployer("roles/cloudscheduler.admin", "create the Cloud Scheduler jobs"),
    _deployer(
        "roles/workflows.editor",
        "create the sample workflows (when a job has one); Workflows has no per-workflow IAM to manage",
    ),
    _deployer(
        "roles/bigquery.dataOwner",
        "create the sample BigQuery dataset and grant the runtime account on the datasets its BigQuery "
        "jobs read or write (when a job has one)",
    ),
    _deployer("roles/logging.configWriter", "create the log-based metrics"),
    _deployer("roles/monitoring.editor", "create the alert policies and the dashboard"),
    # Only when the stacks' jobs are granted a role on a resource of one of these kinds: the
    # stack's IAM member resources set the resource's IAM policy, and no role above holds that
    # permission. Each is the narrowest predefined role that does. Pub/Sub has no narrower one
    # at all; Secret Manager's is its admin role too (secretAccessor and the version roles hold
    # no setIamPolicy).
    _deployer(
        "roles/secretmanager.admin",
        "grant the runtime account secretAccessor on each secret a job reads "
        "(secretmanager.secrets.setIamPolicy)",
        job_grant("secret"),
    ),
    _deployer(
        "roles/pubsub.admin",
        "grant the runtime account its roles on the topics and subscriptions jobs name "
        "(pubsub.topics.setIamPolicy, pubsub.subscriptions.setIamPolicy)",
        job_grant("topic"),
        job_grant("subscription"),
    ),
    DEPLOYER_SECRETS_KEY,
)

# What `pulumi preview --policy-pack policy` reads, and nothing that writes: a preview takes no
# lock on a self-managed backend and records no history, and the program reads one data source.
PREVIEWER_GRANTS: Final = (
    Grant(
        Account.PREVIEWER,
        "roles/browser",
        Scope.PROJECT,
        (ALWAYS,),
        "read the project number (gcp.organizations.get_project), the one value the program looks up",
    ),
    Grant(
        Account.PREVIEWER,
        "roles/storage.objectViewer",
        Scope.STATE_BUCKET,
        (STATE_BUCKET,),
        "read the stacks' state and their backend metadata (only with a state bucket)",
    ),
    Grant(
        Account.PREVIEWER,
        "roles/cloudkms.cryptoKeyDecrypter",
        Scope.SECRETS_KEY,
        (SECRETS_KEY,),
        "decrypt the stacks' secrets (only with the KMS secrets provider)",
    ),
)

GRANTS: Final = (*STACK_GRANTS, *DEPLOYER_GRANTS, *PREVIEWER_GRANTS)


def grants_present(kinds: Collection[str], grants: tuple[Grant, ...] = GRANTS) -> tuple[Grant, ...]:
    """The rows of `grants` a checkout with the target kinds `kinds` (config keys) can make: the
    conditions on an absent kind dropped, and a row that had no other left out."""
    present = []
    for grant in grants:
        when = tuple(
            condition for condition in grant.when if condition.kind is None or condition.kind in kinds
        )
        if when:
            present.append(dataclasses.replace(grant, when=when))
    return tuple(present)
