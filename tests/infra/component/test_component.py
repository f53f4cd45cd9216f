"""The component under Pulumi mocks: every resource, every property the design depends on."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
from pathlib import Path

import pytest

from exactly_once.config import JOB_TABLE_FILE
from exactly_once.delivery.scheduler_request import LOCATION_HEADER, PROJECT_HEADER
from exactly_once.ledger.fields import UNINDEXED_RUN_FIELDS
from infra.component import COMPONENT_TYPE, REQUIRED_APIS
from infra.config.schema import REPO_ROOT
from infra.monitoring import log_filters
from infra.monitoring.alerts import ALERTS
from infra.plan.audit_job import AUDIT_HANDLER, with_audit_job
from infra.plan.headers import headers_for
from infra.resources.source import source_hash
from infra.settings.stack import StackSettings
from tests.infra.conftest import PROJECT, REGION, build, valid_job, valid_values
from tests.support.stack_tables import shipped_table, table_handlers
from tests.support.stacks import dev_stack_resources, fixture_stack
from tools.mocked_program import OFFSET, MockedResource, MockedStack, mock_stack

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
JOB = "gcp:cloudscheduler/job:Job"
FIELD = "gcp:firestore/field:Field"
ACCOUNT = "gcp:serviceaccount/account:Account"
URI = "https://eos-prod-handler-xyz-uc.a.run.app"


@pytest.fixture(scope="module")
def stack() -> MockedStack:
    return mock_stack(
        build(
            valid_values(
                jobs=[
                    valid_job(name="every-5", body={"sleep_seconds": 2}, handler="jobs.noop:do_nothing"),
                    valid_job(name="nightly", schedule="0 3 * * *", timeZone="Europe/Berlin"),
                ]
            )
        )
    )


def configured_jobs(stack: MockedStack) -> list[MockedResource]:
    """The stack's Cloud Scheduler jobs but its own missed-run audit."""
    return [r for r in stack.of_type(JOB) if not r.inputs["name"].endswith("_missed-run-audit")]


def account_email(stack: MockedStack, name: str) -> str:
    return next(str(r.outputs["email"]) for r in stack.of_type(ACCOUNT) if r.name == name)


def test_every_child_is_parented_to_the_component(stack: MockedStack) -> None:
    component = stack.component
    children = [r for r in stack.resources if r.type != COMPONENT_TYPE]
    # APIs and the pause after them, the reference to the stack's last update (its region) +
    # database, TTL field, 2 accounts, 2 bindings, bucket, object, function, 2 jobs and
    # the audit job, the build's account, image repository and its 3 grants, the 2 IAM
    # propagation pauses, 3 audit horizons, the log metrics and the pause for their types, the
    # alert policies and the dashboard, and the indexing exemptions of the run records.
    assert len(children) == (
        len(REQUIRED_APIS)
        + 2
        + 12
        + 5
        + 2
        + 3
        + len(log_filters.METRICS)
        + 1
        + len(ALERTS)
        + 1
        + len(UNINDEXED_RUN_FIELDS)
    )
    assert {r.parent for r in children} == {component.urn}
    assert all(f"{COMPONENT_TYPE}$" in r.urn for r in children)


def test_component_registers_its_outputs(stack: MockedStack) -> None:
    assert stack.component_outputs == {
        "functionUri": URI,
        "jobNames": ["eos-prod_every-5", "eos-prod_nightly", "eos-prod_missed-run-audit"],
        "runtimeServiceAccount": f"eos-prod-runtime@{PROJECT}.iam.gserviceaccount.com",
        "invokerServiceAccount": f"eos-prod-invoker@{PROJECT}.iam.gserviceaccount.com",
        "buildServiceAccount": f"eos-prod-builder@{PROJECT}.iam.gserviceaccount.com",
        "databaseName": "eos-prod-ledger",
        "runsCollection": "scheduler_runs",
        "region": REGION,
    }


def test_apis_are_enabled_and_left_enabled_on_destroy(stack: MockedStack) -> None:
    services = stack.of_type("gcp:projects/service:Service")
    assert sorted(r.inputs["service"] for r in services) == sorted(REQUIRED_APIS)
    assert all(r.inputs["disableOnDestroy"] is False and r.inputs["project"] == PROJECT for r in services)


def test_two_jobs_share_one_database_and_one_ttl_policy(stack: MockedStack) -> None:
    database = stack.one("gcp:firestore/database:Database")
    assert database.inputs["type"] == "FIRESTORE_NATIVE"
    assert database.inputs["name"] == "eos-prod-ledger"
    assert database.inputs["locationId"] == REGION
    assert database.inputs["deleteProtectionState"] == "DELETE_PROTECTION_ENABLED"
    assert database.inputs["deletionPolicy"] == "ABANDON"
    ttl = next(field for field in stack.of_type(FIELD) if field.name == "eos-runs-ttl")
    assert ttl.inputs == {
        "project": PROJECT,
        "database": "eos-prod-ledger",
        "collection": "scheduler_runs",
        "field": "expire_at",
        "ttlConfig": {},
        "indexConfig": {},
    }
    assert len(stack.of_type(JOB)) == 3  # and the missed-run audit


def test_dev_database_can_be_deleted() -> None:
    dev = {r.type: r for r in dev_stack_resources()}
    database = dev["gcp:firestore/database:Database"]
    assert database.inputs["deleteProtectionState"] == "DELETE_PROTECTION_DISABLED"
    assert database.inputs["deletionPolicy"] == "DELETE"


def test_runtime_account_gets_datastore_user_on_this_database_only(stack: MockedStack) -> None:
    (binding,) = [
        r
        for r in stack.of_type("gcp:projects/iAMMember:IAMMember")
        if r.inputs["role"] == "roles/datastore.user"
    ]
    assert binding.inputs["member"] == f"serviceAccount:{account_email(stack, 'eos-runtime')}"
    expression = binding.inputs["condition"]["expression"]
    database = f"projects/{PROJECT}/databases/eos-prod-ledger"
    assert expression == f'resource.name == "{database}" || resource.name.startsWith("{database}/")'
    assert binding.inputs["condition"]["title"]


def test_invoker_may_invoke_only_the_functions_service(stack: MockedStack) -> None:
    (binding,) = stack.of_type("gcp:cloudrunv2/serviceIamMember:ServiceIamMember")
    function = stack.one(FUNCTION)
    assert binding.inputs["role"] == "roles/run.invoker"
    assert binding.inputs["name"] == function.outputs["serviceConfig"]["service"]
    assert binding.inputs["location"] == REGION
    assert binding.inputs["member"] == f"serviceAccount:{account_email(stack, 'eos-invoker')}"


def test_no_public_principals_primitive_roles_or_default_accounts(stack: MockedStack) -> None:
    text = json.dumps([r.inputs for r in stack.resources], default=repr)
    for forbidden in ("allUsers", "allAuthenticatedUsers", "roles/owner", "roles/editor", "roles/viewer"):
        assert forbidden not in text
    assert "-compute@developer.gserviceaccount.com" not in text
    accounts = {r.inputs["accountId"] for r in stack.of_type(ACCOUNT)}
    assert accounts == {"eos-prod-runtime", "eos-prod-invoker", "eos-prod-builder"}


def test_source_bucket_is_private(stack: MockedStack) -> None:
    bucket = stack.one("gcp:storage/bucket:Bucket")
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["location"] == REGION


def test_source_object_is_named_by_content_hash_and_deployed_by_generation(stack: MockedStack) -> None:
    source = stack.one("gcp:storage/bucketObject:BucketObject")
    function = stack.one(FUNCTION)
    # The hash covers the job table the archive ships beside the checked-out files.
    table = source.inputs["source"].assets[JOB_TABLE_FILE].text
    assert (
        source.inputs["name"]
        == f"function-{source_hash(REPO_ROOT / 'function', {JOB_TABLE_FILE: table})[:32]}.zip"
    )
    assert source.inputs["bucket"] == stack.one("gcp:storage/bucket:Bucket").outputs["name"]
    assert function.inputs["buildConfig"]["source"]["storageSource"] == {
        "bucket": source.inputs["bucket"],
        "object": source.inputs["name"],
        "generation": source.outputs["generation"],
    }


def test_code_change_renames_the_source_object_and_no_change_keeps_it(tmp_path: Path) -> None:
    function_dir = tmp_path / "function"
    shutil.copytree(REPO_ROOT / "function", function_dir, ignore=shutil.ignore_patterns("__pycache__"))
    settings = build(valid_values())

    def object_name() -> str:
        source = mock_stack(settings, function_dir).one("gcp:storage/bucketObject:BucketObject")
        return str(source.inputs["name"])

    first = object_name()
    assert object_name() == first
    (function_dir / "__pycache__").mkdir(exist_ok=True)
    (function_dir / "__pycache__" / "main.cpython-312.pyc").write_bytes(b"cache")
    assert object_name() == first
    (function_dir / "requirements.txt").write_text((function_dir / "requirements.txt").read_text() + "\n")
    changed = object_name()
    assert changed != first
    # A change of one job's policy is a change of the shipped table: a new object too.
    settings = build(valid_values(jobs=[valid_job(overlap="skip")]))
    assert object_name() != changed


def test_function_build_and_service_config(stack: MockedStack) -> None:
    function = stack.one(FUNCTION)
    assert function.inputs["location"] == REGION
    assert function.inputs["buildConfig"]["runtime"] == "python312"
    assert function.inputs["buildConfig"]["entryPoint"] == "handle_scheduled_job"
    service = function.inputs["serviceConfig"]
    assert service["serviceAccountEmail"] == account_email(stack, "eos-runtime")
    assert service["timeoutSeconds"] == 60
    assert service["maxInstanceCount"] == 10
    assert service["maxInstanceRequestConcurrency"] == 1  # the watchdog ends a whole process
    assert service["ingressSettings"] == "ALLOW_INTERNAL_ONLY"
    assert service["allTrafficOnLatestRevision"] is True
    assert service["environmentVariables"] == {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "FIRESTORE_DATABASE": "eos-prod-ledger",
        "RUNS_COLLECTION": "scheduler_runs",
        "LEASE_SECONDS": "30",
        "JOB_TIME_LIMIT_SECONDS": "55",
        "RETENTION_SECONDS": "86400",
        "JOB_HANDLER": "jobs.demo:run_demo_job",
        # Each job's policy ships in the source, as this file beside main.py.
        "JOB_TABLE": "job_table.json",
    }
    table = shipped_table(stack.resources)
    assert table_handlers(table) == {
        "eos-prod_every-5": "jobs.noop:do_nothing",
        "eos-prod_missed-run-audit": AUDIT_HANDLER,
    }
    # The audit waits for another audit run of its own (infra/plan/audit_job.py).
    assert {job: policy.overlap.value for job, policy in table.jobs.items() if policy.overlap != "allow"} == {
        "eos-prod_missed-run-audit": "wait"
    }
    assert table.audit is not None


def test_configured_ingress_and_env_without_handlers() -> None:
    # A 120 s lease needs later retries: 30, 90, 210, 450, 930 s.
    retry = {"retryCount": 5, "minBackoffSeconds": 30, "maxBackoffSeconds": 600, "maxDoublings": 4}
    settings = build(
        valid_values(
            ingress="ALLOW_ALL",
            functionTimeoutSeconds=300,
            leaseSeconds=120,
            retentionSeconds=7200,
            jobs=[valid_job(attemptDeadlineSeconds=300, retry=retry)],
        )
    )
    stack = mock_stack(settings)
    service = stack.one(FUNCTION).inputs["serviceConfig"]
    assert service["ingressSettings"] == "ALLOW_ALL"
    assert service["timeoutSeconds"] == 300
    assert service["environmentVariables"]["LEASE_SECONDS"] == "120"
    assert service["environmentVariables"]["JOB_TIME_LIMIT_SECONDS"] == "295"
    assert service["environmentVariables"]["RETENTION_SECONDS"] == "7200"
    # Only the audit job has a handler of its own.
    assert table_handlers(shipped_table(stack.resources)) == {"eos-prod_missed-run-audit": AUDIT_HANDLER}


def test_scheduler_jobs_post_to_the_function_with_oidc(stack: MockedStack) -> None:
    jobs = {r.inputs["name"]: r.inputs for r in stack.of_type(JOB)}
    invoker = account_email(stack, "eos-invoker")
    nightly, every5 = jobs["eos-prod_nightly"], jobs["eos-prod_every-5"]
    assert (nightly["schedule"], nightly["timeZone"]) == ("0 3 * * *", "Europe/Berlin")
    assert (every5["schedule"], every5["timeZone"]) == ("*/15 * * * *", "Etc/UTC")
    for job in (nightly, every5):
        assert job["region"] == REGION and job["project"] == PROJECT
        assert job["attemptDeadline"] == "60s"
        assert job["retryConfig"] == {
            "retryCount": 5,
            "maxRetryDuration": "0s",
            "minBackoffDuration": "10s",
            "maxBackoffDuration": "300s",
            "maxDoublings": 3,
        }
        target = job["httpTarget"]
        assert target["httpMethod"] == "POST"
        assert target["uri"] == URI == stack.one(FUNCTION).outputs["serviceConfig"]["uri"]
        assert target["oidcToken"] == {"serviceAccountEmail": invoker, "audience": URI}
    assert nightly["httpTarget"]["headers"] == {PROJECT_HEADER: PROJECT, LOCATION_HEADER: REGION}
    assert "body" not in nightly["httpTarget"]
    assert every5["httpTarget"]["headers"] == {
        PROJECT_HEADER: PROJECT,
        LOCATION_HEADER: REGION,
        "Content-Type": "application/json",
    }
    assert json.loads(base64.b64decode(every5["httpTarget"]["body"])) == {"sleep_seconds": 2}


def test_job_headers_are_the_settings_headers(two_job_settings: StackSettings) -> None:
    jobs = {r.inputs["name"]: r.inputs for r in mock_stack(two_job_settings).of_type(JOB)}
    for job in two_job_settings.jobs:
        assert jobs[two_job_settings.scheduler_job_id(job)]["httpTarget"]["headers"] == headers_for(
            two_job_settings, job
        )


def test_fractional_durations_keep_their_fraction() -> None:
    retry = {"retryCount": 5, "minBackoffSeconds": 12.5, "maxBackoffSeconds": 300, "maxDoublings": 3}
    settings = build(valid_values(jobs=[valid_job(retry=retry, attemptDeadlineSeconds=62.5)]))
    job = configured_jobs(mock_stack(settings))[0].inputs
    assert job["attemptDeadline"] == "62.5s"
    assert job["retryConfig"]["minBackoffDuration"] == "12.5s"


def test_advisory_timing_is_logged_as_a_warning_not_an_error() -> None:
    settings = build(valid_values(jobs=[valid_job(attemptDeadlineSeconds=30)]))
    warnings = mock_stack(settings).warnings
    assert any(
        "jobs[0].attemptDeadlineSeconds" in w and "differs from how long an attempt may take" in w
        for w in warnings
    )
    assert mock_stack(build(valid_values())).warnings == []


def test_dev_stack_declares_one_job_per_configured_job() -> None:
    settings = fixture_stack("dev")
    resources = dev_stack_resources()
    names = sorted(r.inputs["name"] for r in resources if r.type == JOB)
    assert names == sorted(settings.scheduler_job_id(job) for job in with_audit_job(settings).jobs)


def test_the_component_has_the_one_name_the_local_tools_assume(stack: MockedStack) -> None:
    """`ops` and `make demo` compute every id from the settings alone, with COMPONENT_NAME: the
    name `__main__.py` gives its component, so the ids they compute are the ids it deploys."""
    from policy.scheduler_guardrails.rules.config.names import COMPONENT_NAME

    assert stack.component.name == COMPONENT_NAME
    settings = build(valid_values())
    deployed = {r.inputs["name"] for r in stack.of_type(JOB)}
    assert {settings.scheduler_job_id(job) for job in settings.jobs} <= deployed


def test_run_records_growing_fields_are_exempt_from_indexing_one_field_operation_at_a_time(
    stack: MockedStack,
) -> None:
    """Claim, completion and schedule times only grow: indexed, they would cap the run collection
    at about 500 writes a second. Firestore runs one field operation per database at a time, so
    each field setting waits for the one before it."""
    fields = [field for field in stack.of_type(FIELD) if field.inputs["collection"] == "scheduler_runs"]
    assert [field.inputs["field"] for field in fields] == [
        "expire_at",
        *UNINDEXED_RUN_FIELDS,
    ]
    for field in fields[1:]:
        assert field.inputs["indexConfig"] == {} and "ttlConfig" not in field.inputs
    for before, after in itertools.pairwise(fields):
        assert before.urn in stack.dependencies[after.urn]


def test_without_the_missed_run_audit_the_stack_schedules_only_the_configured_jobs() -> None:
    stack = mock_stack(build(valid_values(missedRunAudit=False)))
    assert [job.inputs["name"] for job in stack.of_type(JOB)] == ["eos-prod_every-5"]
    table = shipped_table(stack.resources)
    assert table.audit is None and table_handlers(table) == {}
    assert stack.of_type(OFFSET) == []
    # The other alerts do not depend on the audit; the missed-run alert then stays silent.
    assert len(stack.of_type("gcp:monitoring/alertPolicy:AlertPolicy")) == len(ALERTS)
