"""Any stack name Pulumi accepts (up to 100 of letters, digits, '-', '_', '.') gives a valid name
to every resource the stack declares, under mocks: the ids Google checks, and the free-text
fields that carry the stack name and have their own length limits."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from infra.names import (
    DATABASE_ID,
    DISPLAY_NAME_MAX_BYTES,
    FUNCTION_NAME,
    REPOSITORY_ID,
    SCHEDULER_JOB_ID,
    SERVICE_ACCOUNT_ID,
    WORKFLOW_NAME,
)
from tests.infra.conftest import build, valid_job, valid_values
from tests.support.pulumi_harness import MockedResource, MockedStack, mock_stack

# 90 characters: capitals, dots, underscores and hyphens, as `pulumi stack init` allows.
LONG = ("Team.Platform_EU-West." * 5)[:90]
PULUMI_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
# Log-based metric ids: at most 100 of these characters.
METRIC_NAME = re.compile(r"^[A-Za-z0-9_\-.,+!*'()%/]{1,100}$")
# Bucket names: 3-63 of lower-case letters, digits, '-', '_', '.'.
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")
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


@pytest.fixture(scope="module")
def long_stack() -> MockedStack:
    assert len(LONG) == 90 and PULUMI_STACK_NAME.match(LONG)
    assert {".", "_"} <= set(LONG) and LONG.lower() != LONG
    jobs = [valid_job(), valid_job(name="wf", workflow={"sample": True}), valid_job(name="j" * 100)]
    return mock_stack(build(valid_values(jobs=jobs), stack=LONG))


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


def test_display_names_carry_the_stack_name_as_far_as_it_fits(long_stack: MockedStack) -> None:
    accounts = long_stack.of_type("gcp:serviceaccount/account:Account")
    assert len(accounts) == 5
    for account in accounts:
        shown = account.inputs["displayName"]
        assert len(shown.encode()) == DISPLAY_NAME_MAX_BYTES and LONG[:20] in shown


def test_buckets_are_auto_named_from_a_name_the_stack_does_not_lengthen(long_stack: MockedStack) -> None:
    """Pulumi names the source bucket `<logical name>-<7 random>`; the logical name is the
    component's, so the stack name cannot push it past 63."""
    (bucket,) = long_stack.of_type("gcp:storage/bucket:Bucket")
    assert "name" not in bucket.inputs
    assert LONG not in bucket.name and len(bucket.name) + AUTO_NAME_SUFFIX <= 63
    assert BUCKET_NAME.match(bucket.outputs["name"])
