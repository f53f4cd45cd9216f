"""Any stack name Pulumi accepts (up to 100 of letters, digits, '-', '_', '.') gives a valid name
to every resource the stack declares, under mocks: the ids Google checks, and the free-text
fields that carry the stack name and have their own length limits. The stacks have every kind
of job the program deploys something for that the checkout has: with the template's target
kinds, a sample workflow, a sample Cloud Run job, a sample BigQuery job."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from policy.scheduler_guardrails.rules.config.names import (
    BIGQUERY_DATASET_ID,
    DATABASE_ID,
    DISPLAY_NAME_MAX_BYTES,
    FUNCTION_NAME,
    REPOSITORY_ID,
    SCHEDULER_JOB_ID,
    SERVICE_ACCOUNT_ID,
    WORKFLOW_NAME,
)
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KEYS
from tests.infra.conftest import build, valid_job, valid_values
from tests.support.optional import needs_proxy_kinds
from tools.mocked_program import MockedResource, MockedStack, mock_stack

# Capitals, dots, underscores and hyphens, as `pulumi stack init` allows: 90 characters, and
# Pulumi's longest, 100.
LONG_NAMES = {length: ("Team.Platform_EU-West." * 5)[:length] for length in (90, 100)}
PULUMI_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
# Log-based metric ids: at most 100 of these characters.
METRIC_NAME = re.compile(r"^[A-Za-z0-9_\-.,+!*'()%/]{1,100}$")
# Bucket names: 3-63 of lower-case letters, digits, '-', '_', '.'.
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")
# Cloud Run job names: at most 63 of lower-case letters, digits and '-', starting with a letter.
CLOUD_RUN_JOB_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# Pulumi's auto-name: the logical name, '-', 7 random characters.
AUTO_NAME_SUFFIX = 8


def at_most(limit: int) -> Callable[[object], bool]:
    return lambda value: isinstance(value, str) and 0 < len(value.encode()) <= limit


def matches(pattern: re.Pattern[str]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, str) and pattern.match(value) is not None


def condition_title(value: object) -> bool:
    return isinstance(value, dict) and at_most(100)(value.get("title"))


# Per resource type: the inputs Google validates, and how (limits from each API's reference).
RULES: dict[str, dict[str, Callable[[object], bool]]] = {
    "gcp:serviceaccount/account:Account": {
        "accountId": matches(SERVICE_ACCOUNT_ID),
        "displayName": at_most(DISPLAY_NAME_MAX_BYTES),
        "description": at_most(256),
    },
    "gcp:cloudfunctionsv2/function:Function": {"name": matches(FUNCTION_NAME)},
    "gcp:firestore/database:Database": {"name": matches(DATABASE_ID)},
    "gcp:cloudscheduler/job:Job": {"name": matches(SCHEDULER_JOB_ID), "description": at_most(500)},
    "gcp:artifactregistry/repository:Repository": {"repositoryId": matches(REPOSITORY_ID)},
    "gcp:workflows/workflow:Workflow": {"name": matches(WORKFLOW_NAME), "description": at_most(1000)},
    "gcp:logging/metric:Metric": {"name": matches(METRIC_NAME)},
    "gcp:monitoring/alertPolicy:AlertPolicy": {"displayName": at_most(512)},
    "gcp:cloudrunv2/job:Job": {"name": matches(CLOUD_RUN_JOB_NAME)},
    "gcp:cloudrunv2/jobIamMember:JobIamMember": {"name": matches(CLOUD_RUN_JOB_NAME)},
    "gcp:bigquery/dataset:Dataset": {"datasetId": matches(BIGQUERY_DATASET_ID)},
    "gcp:bigquery/datasetIamMember:DatasetIamMember": {"datasetId": matches(BIGQUERY_DATASET_ID)},
    "gcp:projects/iAMMember:IAMMember": {},
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember": {},
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": {},
    "gcp:firestore/field:Field": {},
    "gcp:monitoring/dashboard:Dashboard": {},
    "gcp:projects/service:Service": {},
    "gcp:storage/bucketObject:BucketObject": {},
    "gcp:storage/bucket:Bucket": {},
    "time:index/sleep:Sleep": {},
    "time:index/offset:Offset": {},
}


# Each target kind's sample job (a sample Cloud Run job among them, which `samples: true` leaves
# out), for the kinds present: a checkout without a kind has nothing of it to name.
KIND_SAMPLES = {
    "workflow": valid_job(name="wf", workflow={"sample": True}),
    "cloudRunJob": valid_job(name="sample-job", cloudRunJob={"sample": True}),
    "bigquery": valid_job(name="sample-query", schedule="0 * * * *", bigquery={"sample": True}),
}
JOBS = [
    valid_job(),
    valid_job(name="j" * 100),
    *(job for key, job in KIND_SAMPLES.items() if key in TARGET_KEYS),
]
# The accounts every stack has, by the suffix of their ids; and those each kind's sample adds:
# the token check's (which the sample workflow and the sample Cloud Run job call) and the
# accounts the samples run as.
ACCOUNTS = {"runtime", "invoker", "builder"}
KIND_ACCOUNTS = {"workflow": {"tokens", "workflow"}, "cloudRunJob": {"tokens", "crjob"}, "bigquery": set()}


@pytest.fixture(scope="module", params=sorted(LONG_NAMES), ids=lambda length: f"{length}-characters")
def long_name(request: pytest.FixtureRequest) -> str:
    name = LONG_NAMES[request.param]
    assert len(name) == request.param and PULUMI_STACK_NAME.match(name)
    assert {".", "_"} <= set(name) and name.lower() != name
    return name


@pytest.fixture(scope="module")
def long_stack(long_name: str) -> MockedStack:
    return mock_stack(build(valid_values(jobs=JOBS), stack=long_name))


def invalid_inputs(resource: MockedResource) -> list[str]:
    assert resource.type in RULES, f"{resource.type}: which of its inputs does Google validate?"
    bad = [key for key, valid in RULES[resource.type].items() if not valid(resource.inputs.get(key))]
    if "condition" in resource.inputs and not condition_title(resource.inputs["condition"]):
        bad.append("condition.title")
    return bad


def test_every_resource_of_a_90_character_stack_has_valid_names(long_stack: MockedStack) -> None:
    custom = [r for r in long_stack.resources if r.custom]
    assert len(custom) >= 40
    assert {r.name: bad for r in custom if (bad := invalid_inputs(r))} == {}


def test_display_names_carry_the_stack_name_as_far_as_it_fits(
    long_stack: MockedStack, long_name: str
) -> None:
    accounts = long_stack.of_type("gcp:serviceaccount/account:Account")
    # With the template's kinds: runtime, invoker, builder, tokens, workflow, and the sample
    # Cloud Run job's crjob.
    expected = ACCOUNTS.union(*(KIND_ACCOUNTS[key] for key in KIND_SAMPLES if key in TARGET_KEYS))
    assert {a.inputs["accountId"].rsplit("-", 1)[-1] for a in accounts} == expected
    for account in accounts:
        shown = account.inputs["displayName"]
        assert len(shown.encode()) == DISPLAY_NAME_MAX_BYTES and long_name[:20] in shown


@needs_proxy_kinds
def test_the_sample_targets_are_named_within_their_limits(long_stack: MockedStack) -> None:
    """The Cloud Run job and the dataset, whose ids allow other characters and lengths than the
    rest: each grant names the shortened id of its resource, and the job runs as its account."""
    (job,) = long_stack.of_type("gcp:cloudrunv2/job:Job")
    assert len(job.inputs["name"]) <= 63 and job.inputs["name"].endswith("-sample-job")
    job_grants = long_stack.of_type("gcp:cloudrunv2/jobIamMember:JobIamMember")
    assert len(job_grants) == 2 and {g.inputs["name"] for g in job_grants} == {job.inputs["name"]}
    (dataset,) = long_stack.of_type("gcp:bigquery/dataset:Dataset")
    assert dataset.inputs["datasetId"].endswith("_samples")
    (dataset_grant,) = long_stack.of_type("gcp:bigquery/datasetIamMember:DatasetIamMember")
    assert dataset_grant.inputs["datasetId"] == dataset.inputs["datasetId"]
    (crjob,) = [
        a
        for a in long_stack.of_type("gcp:serviceaccount/account:Account")
        if a.inputs["accountId"].endswith("-crjob")
    ]
    assert job.inputs["template"]["template"]["serviceAccount"] == crjob.outputs["email"]


def test_buckets_are_auto_named_from_a_name_the_stack_does_not_lengthen(
    long_stack: MockedStack, long_name: str
) -> None:
    """Pulumi names the source bucket `<logical name>-<7 random>`; the logical name is the
    component's, so the stack name cannot push it past 63."""
    (bucket,) = long_stack.of_type("gcp:storage/bucket:Bucket")
    assert "name" not in bucket.inputs
    assert long_name not in bucket.name and len(bucket.name) + AUTO_NAME_SUFFIX <= 63
    assert BUCKET_NAME.match(bucket.outputs["name"])
