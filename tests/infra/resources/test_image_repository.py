"""Every image repository the stack declares cleans itself up: every change of a job's settings
rebuilds the function, so without a policy its images pile up for ever; with one, images older
than a month go, but never the newest ones a rollback to an earlier revision needs."""

from __future__ import annotations

from typing import Any

import pytest

from infra.resources.build import IMAGE_MAX_AGE, IMAGES_KEPT
from tests.infra.conftest import build, valid_values
from tools.mocked_program import mock_stack

REPOSITORY = "gcp:artifactregistry/repository:Repository"


@pytest.mark.parametrize(
    "values",
    [{}, {"secondRegion": "europe-west4", "databaseLocation": "eur3"}],
    ids=["one region", "two regions"],
)
def test_every_image_repository_keeps_the_newest_images_and_deletes_the_old(values: dict[str, Any]) -> None:
    stack = mock_stack(build(valid_values(**values)))
    repositories = stack.of_type(REPOSITORY)
    assert len(repositories) == (2 if values else 1)
    for repository in repositories:
        policies = {policy["id"]: policy for policy in repository.inputs["cleanupPolicies"]}
        assert repository.inputs["cleanupPolicyDryRun"] is False
        keep, delete = policies["keep-newest"], policies["delete-old"]
        assert keep["action"] == "KEEP" and keep["mostRecentVersions"] == {"keepCount": IMAGES_KEPT}
        assert delete["action"] == "DELETE"
        assert delete["condition"] == {
            "olderThan": f"{int(IMAGE_MAX_AGE.total_seconds())}s",
            "tagState": "ANY",
        }
