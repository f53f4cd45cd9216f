"""runtime-account-grants (identities/runtime.py): the runtime account holds no project-wide
Cloud Run or broad BigQuery role, and every other grant is on one resource of a listed kind."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from ...scheduler_guardrails.offline import UNKNOWN_STRING, run_stack_policy, stack_policy
from ...scheduler_guardrails.policies import PROJECT_IAM_MEMBER
from ...scheduler_guardrails.rules.config.access import GRANT_KINDS
from .. import fixtures

RUNTIME = f"serviceAccount:{fixtures.RUNTIME_SA}"


JOB_MEMBER = "gcp:cloudrunv2/jobIamMember:JobIamMember"


DATASET_MEMBER = "gcp:bigquery/datasetIamMember:DatasetIamMember"


JOB = "projects/my-project/locations/us-central1/jobs/export"


def grants_reported(grant_type: str, props: dict[str, Any]) -> list[str]:
    return run_stack_policy(
        stack_policy("runtime-account-grants"), fixtures.stack_with(grant_type, props)
    ).messages


def test_level_is_mandatory() -> None:
    assert stack_policy("runtime-account-grants").enforcement_level == EnforcementLevel.MANDATORY


@pytest.mark.parametrize(
    ("role", "instead"),
    [
        ("roles/run.developer", "roles/run.jobsExecutorWithOverrides"),
        ("roles/run.admin", "roles/run.jobsExecutorWithOverrides"),
        (
            "roles/bigquery.admin",
            "roles/bigquery.jobUser on the project and dataViewer/dataEditor per dataset",
        ),
        ("roles/bigquery.dataEditor", "on the datasets the job writes"),
    ],
)
def test_project_wide_cloud_run_and_broad_bigquery_roles_are_refused(role: str, instead: str) -> None:
    [message] = grants_reported(
        PROJECT_IAM_MEMBER, {"project": "my-project", "role": role, "member": RUNTIME}
    )
    assert role in message and "project-wide" in message and instead in message


def test_the_roles_the_stack_grants_pass() -> None:
    assert (
        grants_reported(
            JOB_MEMBER, {"name": "export", "role": "roles/run.jobsExecutorWithOverrides", "member": RUNTIME}
        )
        == []
    )
    assert (
        grants_reported(
            DATASET_MEMBER, {"datasetId": "sales", "role": "roles/bigquery.dataViewer", "member": RUNTIME}
        )
        == []
    )
    project = {"project": "my-project", "role": "roles/bigquery.jobUser", "member": RUNTIME}
    assert grants_reported(PROJECT_IAM_MEMBER, project) == []


@pytest.mark.parametrize(
    ("grant_type", "role"),
    [
        (JOB_MEMBER, "roles/run.admin"),
        (DATASET_MEMBER, "roles/bigquery.dataOwner"),
        (DATASET_MEMBER, "roles/bigquery.admin"),
    ],
)
def test_a_role_broader_than_its_kind_lists_is_refused(grant_type: str, role: str) -> None:
    [message] = grants_reported(
        grant_type, {"name": "export", "datasetId": "sales", "role": role, "member": RUNTIME}
    )
    assert role in message and "more than a job needs" in message


@pytest.mark.parametrize(
    "grant_type",
    [
        "gcp:storage/bucketIAMBinding:BucketIAMBinding",
        "gcp:folder/iAMMember:IAMMember",
        "gcp:organizations/iAMMember:IAMMember",
        "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember",
    ],
)
def test_grants_outside_the_listed_kinds_are_refused(grant_type: str) -> None:
    props = {"role": "roles/storage.objectViewer", "member": RUNTIME, "members": [RUNTIME], "bucket": "b"}
    messages = grants_reported(grant_type, props)
    assert messages and all("GRANT_KINDS" in message for message in messages)


def test_other_accounts_and_unknown_accounts_are_not_judged() -> None:
    other = {
        "name": "export",
        "role": "roles/run.admin",
        "member": "serviceAccount:someone@my-project.iam.gserviceaccount.com",
    }
    assert grants_reported(JOB_MEMBER, other) == []
    function = fixtures.function()
    function["serviceConfig"]["serviceAccountEmail"] = UNKNOWN_STRING
    resources = fixtures.stack_with(
        JOB_MEMBER, {"name": "export", "role": "roles/run.admin", "member": RUNTIME}, function
    )
    assert run_stack_policy(stack_policy("runtime-account-grants"), resources).messages == []


def test_every_listed_kind_has_roles_and_none_of_them_administers() -> None:
    for kind in GRANT_KINDS:
        assert kind.roles and kind.resource_type.startswith("gcp:")
        assert not {
            role for role in kind.roles if role.endswith(("admin", "Admin", "Owner", "owner", "developer"))
        }
