"""The registry: every policy of the pack once, with its name, enforcement level and description.

Forkers change schedules, timeouts and IAM. Each policy here stops one way a fork could
silently lose or double runs, or open the function to the world. They are plain
`pulumi_policy` objects in `POLICIES`, so tests call them directly without the Pulumi CLI, and
docs/policy.md's table is rendered from this list (`make docs`). The rules live in the
modules named beside each import, by what they guard (policy/README.md); how they read the
engine's properties, in engine/.
"""

from __future__ import annotations

from typing import Final

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from exactly_once.audit.config import MAX_CATCHUP_WINDOW_RUNS
from exactly_once.ledger.fields import EXPIRE_AT

from .engine.checks import resource_policy
from .engine.types import (
    BUCKET,
    BUCKET_OBJECT,
    CLOUD_RUN_V2_SERVICE,
    FIRESTORE_FIELD,
    FUNCTION_V1,
    FUNCTION_V2,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_IAM_POLICY,
    SCHEDULER_JOB,
    STORAGE_ACL_TYPES,
    is_iam_type,
)
from .functions.env import (
    SECRET_ENV_TYPES,
    check_environment_size,
    check_no_test_switches,
    check_secrets_by_reference,
)
from .functions.identity import check_build_service_account, check_dedicated_service_account
from .functions.instances import check_one_request_per_instance
from .identities.allowlist import (
    ALLOWLIST_CONFIG,
    GCF_SOURCES_CONDITION,
    PROJECT_ROLE_ALLOWLIST,
    AllowedProjectRole,
    Holder,
    check_project_iam_allowlist,
)
from .identities.ci import READ_ONLY_ROLES, validate_ci_read_only
from .identities.holders import validate_project_role_holders
from .identities.outside import validate_grants_to_own_accounts
from .identities.roles import check_conditional_roles, check_no_primitive_roles
from .identities.runtime import validate_runtime_grants
from .public_access import check_bucket_private, check_ingress, check_no_public_principals
from .scheduler_jobs import (
    check_job_auth,
    check_job_body,
    check_job_not_google_api,
    check_job_schedule_and_deadline,
)
from .timing.catchup import validate_catchup_windows
from .timing.invariants import timing_validator
from .ttl import validate_idempotency_ttl, validate_runs_ttl

PACK_NAME: Final = "exactly-once-scheduler-guardrails"

# The pack's vocabulary, for `policy/__main__.py`, tests and forks that extend the pack.
__all__ = [
    "BUCKET",
    "CLOUD_RUN_V2_SERVICE",
    "FIRESTORE_FIELD",
    "FUNCTION_V1",
    "FUNCTION_V2",
    "GCF_SOURCES_CONDITION",
    "PACK_NAME",
    "POLICIES",
    "PROJECT_IAM_BINDING",
    "PROJECT_IAM_MEMBER",
    "PROJECT_IAM_POLICY",
    "PROJECT_ROLE_ALLOWLIST",
    "READ_ONLY_ROLES",
    "SCHEDULER_JOB",
    "AllowedProjectRole",
    "Holder",
]

# --- the pack -------------------------------------------------------------------------------

_MANDATORY = EnforcementLevel.MANDATORY
_ADVISORY = EnforcementLevel.ADVISORY

POLICIES: Final[list[ResourceValidationPolicy | StackValidationPolicy]] = [
    resource_policy(
        "scheduler-job-oidc-auth",
        "Cloud Scheduler HTTP jobs authenticate with an OIDC token that names its audience.",
        _MANDATORY,
        [SCHEDULER_JOB],
        check_job_auth,
    ),
    resource_policy(
        "scheduler-job-schedule-and-deadline",
        "Cloud Scheduler jobs use a unix-cron schedule that fires (no 31 February) and an attempt deadline "
        "within 15s..30min.",
        _MANDATORY,
        [SCHEDULER_JOB],
        check_job_schedule_and_deadline,
    ),
    resource_policy(
        "scheduler-job-no-direct-google-api",
        "Cloud Scheduler jobs never call *.googleapis.com directly; they go through the dedup proxy.",
        _MANDATORY,
        [SCHEDULER_JOB],
        check_job_not_google_api,
    ),
    resource_policy(
        "scheduler-job-body-accepted",
        "Cloud Scheduler jobs send a body the function accepts: within its size limit, and strict JSON "
        "(no NaN or Infinity).",
        _MANDATORY,
        [SCHEDULER_JOB],
        check_job_body,
    ),
    resource_policy(
        "no-public-principals",
        "No allUsers / allAuthenticatedUsers on functions, Cloud Run services or buckets.",
        _MANDATORY,
        lambda t: is_iam_type(t) or t in STORAGE_ACL_TYPES or t in (BUCKET_OBJECT, CLOUD_RUN_V2_SERVICE),
        check_no_public_principals,
    ),
    resource_policy(
        "function-dedicated-service-account",
        "Functions run as a dedicated service account, never the default compute account.",
        _MANDATORY,
        [FUNCTION_V2, FUNCTION_V1, CLOUD_RUN_V2_SERVICE],
        check_dedicated_service_account,
    ),
    resource_policy(
        "function-build-service-account",
        "Functions build as a dedicated account, never Cloud Build's default (compute) identity.",
        _MANDATORY,
        [FUNCTION_V2, FUNCTION_V1],
        check_build_service_account,
    ),
    resource_policy(
        "function-ingress-restricted",
        "Function ingress is internal-only unless a scheduler in another project needs allow-all.",
        _ADVISORY,
        [FUNCTION_V2, FUNCTION_V1, CLOUD_RUN_V2_SERVICE],
        check_ingress,
    ),
    resource_policy(
        "one-request-per-instance",
        "The deduplicating function serves one request per instance: ending an attempt ends its process.",
        _MANDATORY,
        [FUNCTION_V2],
        check_one_request_per_instance,
    ),
    resource_policy(
        "function-no-test-switches",
        "Deployed functions set no plaintext *_API_ENDPOINT (Workflows, Cloud Run, BigQuery) and no "
        "DOWNSTREAM_ID_TOKEN_DISABLED.",
        _MANDATORY,
        [FUNCTION_V2, FUNCTION_V1, CLOUD_RUN_V2_SERVICE],
        check_no_test_switches,
    ),
    resource_policy(
        "function-environment-size",
        "A function's environment variables (names and values) and secret variables' names fit Cloud "
        "Run's 32 KiB; per-job settings belong in the job table the function's source ships.",
        _MANDATORY,
        [FUNCTION_V2],
        check_environment_size,
    ),
    resource_policy(
        "no-primitive-roles",
        "No primitive roles (owner, editor, viewer) in any IAM grant.",
        _MANDATORY,
        is_iam_type,
        check_no_primitive_roles,
    ),
    resource_policy(
        "datastore-user-conditional",
        "roles/datastore.user grants carry an IAM condition limiting them to one database.",
        _MANDATORY,
        is_iam_type,
        check_conditional_roles,
    ),
    resource_policy(
        "project-iam-allowlist",
        "Project-wide grants only for allow-listed roles, only to service accounts, never authoritative.",
        _MANDATORY,
        [PROJECT_IAM_MEMBER, PROJECT_IAM_BINDING, PROJECT_IAM_POLICY],
        check_project_iam_allowlist,
        ALLOWLIST_CONFIG,
    ),
    resource_policy(
        "secrets-by-reference",
        "No plain environment variable whose name says secret: Secret Manager references instead.",
        _MANDATORY,
        SECRET_ENV_TYPES,
        check_secrets_by_reference,
    ),
    resource_policy(
        "source-bucket-private",
        "Buckets enforce public access prevention and uniform bucket-level access.",
        _MANDATORY,
        [BUCKET],
        check_bucket_private,
    ),
    StackValidationPolicy(
        name="catchup-window",
        description=(
            "Each job's catch-up window is at least its retry window plus the audit's interval, at most "
            "the ledger's retention, and never holds more runs than the audit walks for a job "
            f"({MAX_CATCHUP_WINDOW_RUNS})."
        ),
        validate=validate_catchup_windows,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="runs-collection-ttl",
        description=f"The runs collection has a TTL on {EXPIRE_AT}, exempt from indexing.",
        validate=validate_runs_ttl,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="idempotency-collection-ttl",
        description=f"When the token check is deployed, its collection has a TTL on {EXPIRE_AT}.",
        validate=validate_idempotency_ttl,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="project-role-holders",
        description="Each allow-listed project role is held only by the account it is listed for.",
        validate=validate_project_role_holders,
        enforcement_level=_MANDATORY,
        config_schema=ALLOWLIST_CONFIG,
    ),
    StackValidationPolicy(
        name="runtime-account-grants",
        description=(
            "The runtime account holds no project-wide Cloud Run or broad BigQuery role, and every other "
            "grant is on one resource of a listed kind, with a role listed for it."
        ),
        validate=validate_runtime_grants,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="ci-read-only-outside-deploys",
        description="An account pull request or branch jobs may impersonate holds only read roles.",
        validate=validate_ci_read_only,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="grants-to-own-accounts-only",
        description=(
            "Roles go only to service accounts the stack creates, or to outside accounts listed for "
            "them, so no stack can arm the CI previewer."
        ),
        validate=validate_grants_to_own_accounts,
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="scheduler-timing-invariants",
        description="Lease, retries and retention fit together so no run is lost or doubled.",
        validate=timing_validator(advisory=False),
        enforcement_level=_MANDATORY,
    ),
    StackValidationPolicy(
        name="scheduler-timing-advisories",
        description=(
            "Attempt deadline matches the job's time limit + 5 s; every job's function is identifiable; "
            "the rules a first preview cannot judge without the job table are named."
        ),
        validate=timing_validator(advisory=True),
        enforcement_level=_ADVISORY,
    ),
]
