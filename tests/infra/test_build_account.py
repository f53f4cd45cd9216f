"""Part B: the function builds run as a dedicated, least-privilege account instead of Cloud
Build's default identity (the default compute account in new projects)."""

from __future__ import annotations

import pytest

from tests.infra.conftest import PROJECT, REGION, build, valid_job, valid_values
from tests.support.pulumi_harness import MockedStack, mock_stack

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
ACCOUNT = "gcp:serviceaccount/account:Account"
BUILDER_EMAIL = f"eos-builder@{PROJECT}.iam.gserviceaccount.com"
BUILDER_MEMBER = f"serviceAccount:{BUILDER_EMAIL}"
REPOSITORY = f"projects/{PROJECT}/locations/{REGION}/repositories/eos-functions"


@pytest.fixture(scope="module")
def stack() -> MockedStack:
    return mock_stack(
        build(valid_values(jobs=[valid_job(), valid_job(name="wf", workflow={"sample": True})]))
    )


def grants_to_builder(stack: MockedStack) -> dict[str, tuple[str, dict[str, object]]]:
    return {
        r.inputs["role"]: (r.type, r.inputs)
        for r in stack.resources
        if r.inputs.get("member") == BUILDER_MEMBER
    }


def test_builder_account_exists(stack: MockedStack) -> None:
    (account,) = [r for r in stack.of_type(ACCOUNT) if r.name == "eos-builder"]
    assert account.inputs["accountId"] == "eos-builder"
    assert account.outputs["email"] == BUILDER_EMAIL


def test_every_function_builds_as_the_builder_into_the_stacks_repository(stack: MockedStack) -> None:
    functions = stack.of_type(FUNCTION)
    assert len(functions) == 2
    for function in functions:
        build_config = function.inputs["buildConfig"]
        assert build_config["serviceAccount"] == f"projects/{PROJECT}/serviceAccounts/{BUILDER_EMAIL}"
        assert build_config["dockerRepository"] == REPOSITORY


def test_repository_is_a_docker_repository_in_the_region(stack: MockedStack) -> None:
    repository = stack.one("gcp:artifactregistry/repository:Repository")
    assert repository.inputs["format"] == "DOCKER"
    assert (repository.inputs["location"], repository.inputs["project"]) == (REGION, PROJECT)
    assert repository.inputs["repositoryId"] == "eos-functions"


def test_builder_holds_exactly_three_least_privilege_grants(stack: MockedStack) -> None:
    grants = grants_to_builder(stack)
    assert sorted(grants) == [
        "roles/artifactregistry.writer",
        "roles/logging.logWriter",
        "roles/storage.objectViewer",
    ]
    kind, log_writer = grants["roles/logging.logWriter"]
    assert kind == "gcp:projects/iAMMember:IAMMember" and log_writer["project"] == PROJECT
    assert "condition" not in log_writer
    kind, writer = grants["roles/artifactregistry.writer"]
    assert kind == "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
    assert (writer["repository"], writer["location"]) == ("eos-functions", REGION)
    kind, viewer = grants["roles/storage.objectViewer"]
    assert kind == "gcp:storage/bucketIAMMember:BucketIAMMember"
    assert viewer["bucket"] == stack.one("gcp:storage/bucket:Bucket").outputs["name"]


def test_runtime_and_invoker_accounts_get_no_build_roles(stack: MockedStack) -> None:
    build_roles = {"roles/logging.logWriter", "roles/artifactregistry.writer", "roles/storage.objectViewer"}
    for r in stack.resources:
        if r.inputs.get("role") in build_roles:
            assert r.inputs["member"] == BUILDER_MEMBER
