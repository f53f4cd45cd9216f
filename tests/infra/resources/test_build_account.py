"""The function builds run as a dedicated, least-privilege account instead of Cloud Build's
default identity (the default compute account in new projects), and only after its grants
have had time to take effect."""

from __future__ import annotations

import pytest

from infra.plan.needs import needs_token_check
from infra.resources.propagation import BUILD_GRANTS_DELAY_SECONDS, SERVING_GRANTS_DELAY_SECONDS
from tests.infra.conftest import PROJECT, REGION, build, valid_values
from tools.mocked_program import PROJECT_NUMBER, SLEEP, MockedStack, mock_stack, pause_seconds

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
ACCOUNT = "gcp:serviceaccount/account:Account"
BUILDER_EMAIL = f"eos-prod-builder@{PROJECT}.iam.gserviceaccount.com"
BUILDER_MEMBER = f"serviceAccount:{BUILDER_EMAIL}"
REPOSITORY = f"projects/{PROJECT}/locations/{REGION}/repositories/eos-prod-functions"


# Every sample: with the template's target kinds, a sample workflow brings the token check, a
# second function built the same way.
SETTINGS = build(valid_values(samples=True))
FUNCTIONS = 2 if needs_token_check(SETTINGS) else 1


@pytest.fixture(scope="module")
def stack() -> MockedStack:
    return mock_stack(SETTINGS)


def grants_to_builder(stack: MockedStack) -> dict[str, tuple[str, dict[str, object]]]:
    return {
        r.inputs["role"]: (r.type, r.inputs)
        for r in stack.resources
        if r.inputs.get("member") == BUILDER_MEMBER
    }


def test_builder_account_exists(stack: MockedStack) -> None:
    (account,) = [r for r in stack.of_type(ACCOUNT) if r.name == "eos-builder"]
    assert account.inputs["accountId"] == "eos-prod-builder"
    assert account.outputs["email"] == BUILDER_EMAIL


def test_every_function_builds_as_the_builder_into_the_stacks_repository(stack: MockedStack) -> None:
    functions = stack.of_type(FUNCTION)
    assert len(functions) == FUNCTIONS
    for function in functions:
        build_config = function.inputs["buildConfig"]
        assert build_config["serviceAccount"] == f"projects/{PROJECT}/serviceAccounts/{BUILDER_EMAIL}"
        assert build_config["dockerRepository"] == REPOSITORY


def test_repository_is_a_docker_repository_in_the_region(stack: MockedStack) -> None:
    repository = stack.one("gcp:artifactregistry/repository:Repository")
    assert repository.inputs["format"] == "DOCKER"
    assert (repository.inputs["location"], repository.inputs["project"]) == (REGION, PROJECT)
    assert repository.inputs["repositoryId"] == "eos-prod-functions"


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
    assert (writer["repository"], writer["location"]) == ("eos-prod-functions", REGION)


def test_builder_may_read_the_gcf_v2_sources_bucket_and_nothing_else(stack: MockedStack) -> None:
    """Cloud Functions copies the upload to gcf-v2-sources-<number>-<region> and the build
    fetches it from there; that bucket only exists after the first deploy, hence a project
    grant narrowed by a condition to exactly that bucket."""
    kind, viewer = grants_to_builder(stack)["roles/storage.objectViewer"]
    assert kind == "gcp:projects/iAMMember:IAMMember" and viewer["project"] == PROJECT
    bucket = f"projects/_/buckets/gcf-v2-sources-{PROJECT_NUMBER}-{REGION}"
    condition = viewer["condition"]
    assert isinstance(condition, dict) and condition["expression"] == (
        f'resource.name == "{bucket}" || resource.name.startsWith("{bucket}/")'
    )
    # The stack's own source bucket is read by Cloud Functions, never by the build.
    assert not stack.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")


def test_functions_build_only_after_the_builder_grants_had_time_to_propagate(stack: MockedStack) -> None:
    """IAM: "typically 2 minutes, potentially 7 minutes or longer"; Google's 60 s sample
    failed half of the time. Every function's dependency chain holds a pause of at least
    120 s that itself comes after all three of the builder's grants."""
    sleep = stack.named(SLEEP, "eos-build-grants-propagation")
    assert pause_seconds(sleep) == BUILD_GRANTS_DELAY_SECONDS >= 120
    assert sleep.inputs["triggers"] == {"builder": BUILDER_MEMBER}
    grants = {r.urn for r in stack.resources if r.inputs.get("member") == BUILDER_MEMBER}
    assert len(grants) == 3 and grants <= set(stack.dependencies[sleep.urn])
    apis = {
        r.urn for r in stack.of_type("gcp:projects/service:Service") if "cloudbuild" in r.inputs["service"]
    }
    assert len(apis) == 1 and apis <= set(stack.dependencies[sleep.urn])
    functions = stack.of_type(FUNCTION)
    assert len(functions) == FUNCTIONS
    for function in functions:
        assert sleep in stack.pauses_before(function.urn, at_least=120)
        assert grants <= stack.waits_for(sleep.urn)


def test_the_serving_pause_is_shorter_because_cloud_scheduler_retries(stack: MockedStack) -> None:
    serving = stack.named(SLEEP, "eos-serving-grants-propagation")
    assert pause_seconds(serving) == SERVING_GRANTS_DELAY_SECONDS
    assert SERVING_GRANTS_DELAY_SECONDS < BUILD_GRANTS_DELAY_SECONDS


def test_the_pauses_are_neither_protected_nor_retained(stack: MockedStack) -> None:
    """`pulumi destroy` removes them, so the next `pulumi up` of the stack pauses again."""
    sleeps = stack.of_type(SLEEP)
    assert len(sleeps) == 4
    assert not any(r.protect or r.retain_on_delete for r in sleeps)


def test_runtime_and_invoker_accounts_get_no_build_roles(stack: MockedStack) -> None:
    build_roles = {"roles/logging.logWriter", "roles/artifactregistry.writer", "roles/storage.objectViewer"}
    for r in stack.resources:
        if r.inputs.get("role") in build_roles:
            assert r.inputs["member"] == BUILDER_MEMBER
