"""The roles the identity that runs `pulumi up` needs on a fresh project, each with its reason,
and the read-only roles of the CI previewer that runs `pulumi preview` for pull requests.

One list each, read by the docs, by the policy pack (which refuses any other role to an account
a pull request may impersonate) and by bootstrap/ where a fork keeps it (it grants exactly
these), and the few deployer roles only some stacks need (GRANT_KIND_ROLES, granted per the
bootstrap's `jobGrants`). They live here, not in bootstrap/, because a deployer made by hand
needs the same roles: a fork that deletes bootstrap/ keeps them. Predefined roles only: no
primitive owner/editor/viewer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final, NamedTuple


class DeployerRole(NamedTuple):
    role: str
    reason: str


DEPLOYER_ROLES: tuple[DeployerRole, ...] = (
    DeployerRole("roles/serviceusage.serviceUsageAdmin", "enable the APIs the stack uses on a fresh project"),
    DeployerRole(
        "roles/browser",
        "read the project number (gcp.organizations.get_project), which names the build's "
        "gcf-v2-sources bucket in its IAM condition",
    ),
    DeployerRole("roles/iam.serviceAccountAdmin", "create the stack's dedicated service accounts"),
    DeployerRole(
        "roles/iam.serviceAccountUser",
        "iam.serviceAccounts.actAs on every account the stack runs something as "
        "(function runtime, token check, build, invoker, workflow, sample Cloud Run job)",
    ),
    DeployerRole(
        "roles/resourcemanager.projectIamAdmin",
        "grant the project-level roles, with IAM conditions, to the stack's own accounts",
    ),
    DeployerRole("roles/datastore.owner", "create the Firestore database and its TTL field policies"),
    DeployerRole("roles/storage.admin", "create the private source bucket and upload the source"),
    DeployerRole(
        "roles/artifactregistry.admin", "create the per-stack image repository and grant the build on it"
    ),
    DeployerRole("roles/cloudfunctions.admin", "create and update the Cloud Run functions"),
    DeployerRole(
        "roles/run.admin",
        "grant roles/run.invoker on the functions' Cloud Run services, create the sample Cloud Run jobs "
        "and grant the runtime account on the Cloud Run jobs it runs",
    ),
    DeployerRole("roles/cloudscheduler.admin", "create the Cloud Scheduler jobs"),
    DeployerRole(
        "roles/workflows.editor",
        "create the sample workflows (when a job has one); Workflows has no per-workflow IAM to manage",
    ),
    DeployerRole(
        "roles/bigquery.dataOwner",
        "create the sample BigQuery dataset and grant the runtime account on the datasets its BigQuery "
        "jobs read or write (when a job has one)",
    ),
    DeployerRole("roles/logging.configWriter", "create the log-based metrics"),
    DeployerRole("roles/monitoring.editor", "create the alert policies and the dashboard"),
)


# What the deployer needs only when the stacks' jobs are granted a role on a resource of one
# of these kinds (the bootstrap key `jobGrants`): the stack's IAM member resources set the
# resource's IAM policy, and no role above holds that permission. Each is the narrowest
# predefined role that does. Pub/Sub has no narrower one at all; Secret Manager's is its admin
# role too (secretAccessor and the version roles hold no setIamPolicy).
GRANT_KIND_ROLES: Final[Mapping[str, DeployerRole]] = MappingProxyType(
    {
        "secret": DeployerRole(
            "roles/secretmanager.admin",
            "grant the runtime account secretAccessor on each secret a job reads "
            "(secretmanager.secrets.setIamPolicy)",
        ),
        "topic": DeployerRole(
            "roles/pubsub.admin",
            "grant the runtime account its roles on the topics and subscriptions jobs name "
            "(pubsub.topics.setIamPolicy, pubsub.subscriptions.setIamPolicy)",
        ),
        "subscription": DeployerRole(
            "roles/pubsub.admin",
            "grant the runtime account its roles on the topics and subscriptions jobs name "
            "(pubsub.topics.setIamPolicy, pubsub.subscriptions.setIamPolicy)",
        ),
    }
)


def deployer_roles(job_grants: Iterable[str] = ()) -> tuple[DeployerRole, ...]:
    """DEPLOYER_ROLES, and the role of each kind in `job_grants` (each role once)."""
    extra: dict[str, DeployerRole] = {}
    for kind in job_grants:
        role = GRANT_KIND_ROLES[kind]
        extra.setdefault(role.role, role)
    return (*DEPLOYER_ROLES, *extra.values())


class PreviewerRole(NamedTuple):
    role: str
    # Where the bootstrap grants it: the project, the state bucket or the secrets key.
    scope: str
    reason: str


PROJECT_SCOPE = "project"
STATE_BUCKET_SCOPE = "state bucket"
SECRETS_KEY_SCOPE = "secrets key"

# What `pulumi preview --policy-pack policy` reads, and nothing that writes: a preview takes no
# lock on a self-managed backend and records no history, and the program reads one data source.
PREVIEWER_ROLES: tuple[PreviewerRole, ...] = (
    PreviewerRole(
        "roles/browser",
        PROJECT_SCOPE,
        "read the project number (gcp.organizations.get_project), the one value the program looks up",
    ),
    PreviewerRole(
        "roles/storage.objectViewer",
        STATE_BUCKET_SCOPE,
        "read the stacks' state and their backend metadata (only with a state bucket)",
    ),
    PreviewerRole(
        "roles/cloudkms.cryptoKeyDecrypter",
        SECRETS_KEY_SCOPE,
        "decrypt the stacks' secrets (only with the KMS secrets provider)",
    ),
)


def previewer_roles_table() -> str:
    """PREVIEWER_ROLES as the Markdown table docs/ci.md shows (a test keeps them equal)."""
    rows = [f"| `{role.role}` | {role.scope} | {role.reason} |" for role in PREVIEWER_ROLES]
    return "\n".join(["| Role | On | Why the previewer needs it |", "| --- | --- | --- |", *rows])


def deployer_roles_table() -> str:
    """DEPLOYER_ROLES as the Markdown table docs/deploy.md shows (a test keeps them equal)."""
    rows = [f"| `{role.role}` | {role.reason} |" for role in DEPLOYER_ROLES]
    return "\n".join(["| Role | Why the deploying identity needs it |", "| --- | --- |", *rows])


def grant_kind_roles_table() -> str:
    """GRANT_KIND_ROLES as the Markdown table docs/deploy.md shows (a test keeps them equal)."""
    rows = [f"| `{kind}` | `{role.role}` | {role.reason} |" for kind, role in GRANT_KIND_ROLES.items()]
    return "\n".join(["| `jobGrants` kind | Role | Why |", "| --- | --- | --- |", *rows])
