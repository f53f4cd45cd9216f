"""The roles the identity that runs `pulumi up` needs on a fresh project, each with its reason.

One list, read by the deploy docs and by bootstrap/ (which grants exactly these to the CI
deployer account). Predefined roles only: no primitive owner/editor.
"""

from __future__ import annotations

from typing import NamedTuple


class DeployerRole(NamedTuple):
    role: str
    reason: str


DEPLOYER_ROLES: tuple[DeployerRole, ...] = (
    DeployerRole("roles/serviceusage.serviceUsageAdmin", "enable the APIs the stack uses on a fresh project"),
    DeployerRole("roles/browser", "read the project number (gcp.organizations.get_project)"),
    DeployerRole("roles/iam.serviceAccountAdmin", "create the stack's dedicated service accounts"),
    DeployerRole(
        "roles/iam.serviceAccountUser",
        "iam.serviceAccounts.actAs on every account the stack runs something as "
        "(function runtime, token check, build, invoker, workflow)",
    ),
    DeployerRole(
        "roles/resourcemanager.projectIamAdmin",
        "grant the project-level roles, with IAM conditions, to the stack's own accounts",
    ),
    DeployerRole("roles/datastore.owner", "create the Firestore database and its TTL field policies"),
    DeployerRole("roles/storage.admin", "create the private source bucket, upload the source, set bucket IAM"),
    DeployerRole("roles/artifactregistry.admin", "create the per-stack image repository and grant the build on it"),
    DeployerRole("roles/cloudfunctions.admin", "create and update the Cloud Run functions"),
    DeployerRole("roles/run.admin", "grant roles/run.invoker on the functions' Cloud Run services"),
    DeployerRole("roles/cloudscheduler.admin", "create the Cloud Scheduler jobs"),
    DeployerRole("roles/workflows.admin", "create the sample workflow (when a job has one)"),
    DeployerRole("roles/logging.configWriter", "create the log-based metrics"),
    DeployerRole("roles/monitoring.editor", "create the alert policies and the dashboard"),
)
