"""Resources shaped like the dev stack's (engine camelCase names) that pass every policy.

Tests copy one, break a single property, and expect exactly that policy to complain.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi
from pulumi_policy import PolicyResource

from exactly_once.delivery.scheduler_request import LOCATION_HEADER, PROJECT_HEADER

from ..scheduler_guardrails.engine.types import BUCKET_OBJECT
from ..scheduler_guardrails.offline import UNKNOWN_STRING, stack_resource
from ..scheduler_guardrails.policies import FIRESTORE_FIELD, FUNCTION_V2, SCHEDULER_JOB

FUNCTION_URL = "https://eos-handler-xyz-uc.a.run.app"
RUNTIME_SA = "eos-runtime@my-project.iam.gserviceaccount.com"
INVOKER_SA = "eos-invoker@my-project.iam.gserviceaccount.com"
BUILDER_SA = "eos-builder@my-project.iam.gserviceaccount.com"


def job() -> dict[str, Any]:
    # Instant failures retry at 10, 30, 70, 150, 310 s: the last three outlive the 30 s lease.
    return copy.deepcopy(
        {
            "name": "demo",
            "schedule": "*/15 * * * *",
            "timeZone": "Etc/UTC",
            "attemptDeadline": "60s",
            "retryConfig": {
                "retryCount": 5,
                "minBackoffDuration": "10s",
                "maxBackoffDuration": "300s",
                "maxDoublings": 3,
                "maxRetryDuration": "0s",
            },
            "httpTarget": {
                "uri": FUNCTION_URL,
                "httpMethod": "POST",
                "headers": {PROJECT_HEADER: "my-project", LOCATION_HEADER: "us-central1"},
                "oidcToken": {"serviceAccountEmail": INVOKER_SA, "audience": FUNCTION_URL},
            },
        }
    )


def function() -> dict[str, Any]:
    return copy.deepcopy(
        {
            "name": "eos-handler",
            "location": "us-central1",
            "url": FUNCTION_URL,
            "buildConfig": {
                "runtime": "python312",
                "entryPoint": "handle_scheduled_job",
                "serviceAccount": f"projects/my-project/serviceAccounts/{BUILDER_SA}",
            },
            "serviceConfig": {
                "serviceAccountEmail": RUNTIME_SA,
                "ingressSettings": "ALLOW_INTERNAL_ONLY",
                "timeoutSeconds": 60,
                "uri": FUNCTION_URL,
                "environmentVariables": {
                    "LEASE_SECONDS": "30",
                    "JOB_TIME_LIMIT_SECONDS": "55",
                    "RETENTION_SECONDS": "86400",
                    "RUNS_COLLECTION": "scheduler_runs",
                },
            },
        }
    )


def ttl_field() -> dict[str, Any]:
    return copy.deepcopy(
        {
            "collection": "scheduler_runs",
            "field": "expire_at",
            "database": "scheduler-dedup",
            "ttlConfig": {},
            "indexConfig": {},
        }
    )


def bucket() -> dict[str, Any]:
    return {"location": "us-central1", "uniformBucketLevelAccess": True, "publicAccessPrevention": "enforced"}


def datastore_grant() -> dict[str, Any]:
    return copy.deepcopy(
        {
            "project": "my-project",
            "role": "roles/datastore.user",
            "member": f"serviceAccount:{RUNTIME_SA}",
            "condition": {
                "title": "only-scheduler-dedup",
                "expression": 'resource.name.startsWith("projects/my-project/databases/scheduler-dedup")',
            },
        }
    )


def run_invoker_grant() -> dict[str, Any]:
    return {
        "name": "projects/my-project/locations/us-central1/services/eos-handler",
        "location": "us-central1",
        "role": "roles/run.invoker",
        "member": f"serviceAccount:{INVOKER_SA}",
    }


def token_check(env: dict[str, Any] | None = None) -> dict[str, Any]:
    """The token-check function: the dedup function's source, another entry point."""
    token = function()
    token["name"] = "eos-token-check"
    token["url"] = token["serviceConfig"]["uri"] = "https://eos-token-check-xyz-uc.a.run.app"
    token["buildConfig"] = {"entryPoint": "check_idempotency_token", "runtime": "python312"}
    token["serviceConfig"]["environmentVariables"] = {
        "FIRESTORE_DATABASE": "scheduler-dedup",
        "IDEMPOTENCY_COLLECTION": "idempotency_tokens",
        "IDEMPOTENCY_RETENTION_SECONDS": "604800",
    } | (env or {})
    return token


SOURCE_BUCKET, SOURCE_OBJECT = "eos-source-a1b2c3d", "function-0123abcd.zip"


def with_table(function: dict[str, Any]) -> dict[str, Any]:
    """`function` reading the job table in its source, as the stack deploys it."""
    function["serviceConfig"]["environmentVariables"]["JOB_TABLE"] = "job_table.json"
    function["buildConfig"]["source"] = {"storageSource": {"bucket": SOURCE_BUCKET, "object": SOURCE_OBJECT}}
    return function


def source_object(table: str | None) -> dict[str, Any]:
    """The source zip's object, its archive holding `table` as job_table.json (None: an archive
    not known until the update, as in a first preview)."""
    archive: Any = (
        UNKNOWN_STRING
        if table is None
        else pulumi.AssetArchive(
            {"main.py": pulumi.StringAsset("# the entry points"), "job_table.json": pulumi.StringAsset(table)}
        )
    )
    return {"bucket": SOURCE_BUCKET, "name": SOURCE_OBJECT, "source": archive}


def table_of(jobs: dict[str, dict[str, Any]], audit: dict[str, Any] | None = None) -> str:
    """A job table's text: `jobs` by job name, and the audit's configuration."""
    return json.dumps({"jobs": jobs, **({"audit": audit} if audit is not None else {})})


# The builders above, under names the parameters of stack() do not shadow.
_default_function, _default_job = function, job


def stack(
    job: dict[str, Any] | None = None,
    function: dict[str, Any] | None = None,
    field: dict[str, Any] | None = None,
    table: str | None = None,
    table_unknown: bool = False,
) -> list[PolicyResource]:
    """A function and the Scheduler job calling it (and a TTL field, when given), as the
    stack policies see them. With `table` (or `table_unknown`), the function reads a job table
    from its source object, which is in the stack too."""
    function = function or _default_function()
    if table is not None or table_unknown:
        function = with_table(function)
    fn = stack_resource(FUNCTION_V2, "eos-function", function)
    resources = [
        fn,
        stack_resource(SCHEDULER_JOB, "eos-job-demo", job or _default_job(), dependencies=[fn]),
    ]
    if field is not None:
        resources.append(stack_resource(FIRESTORE_FIELD, "eos-runs-ttl", field))
    if table is not None or table_unknown:
        resources.append(stack_resource(BUCKET_OBJECT, "eos-source-zip", source_object(table)))
    return resources


def stack_with(
    grant_type: str, props: dict[str, Any], served: dict[str, Any] | None = None
) -> list[PolicyResource]:
    """A stack of a function (`served`, or `function()`) and one grant: what the rules that judge
    a grant by the function it serves read."""
    return [
        stack_resource(FUNCTION_V2, "eos-handler", served or function()),
        stack_resource(grant_type, "grant", props),
    ]
