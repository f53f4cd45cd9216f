"""The config bag as `pulumi up` hands it to the program, for the config tests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pulumi.runtime import config as runtime_config

from tests.infra.conftest import DEMO_HANDLER, NAMESPACE, valid_job
from tests.support.stacks import fixture_stack
from tools.mocked_program import run_mocked_stack


@pytest.fixture
def pulumi_config() -> Iterator[dict[str, str]]:
    """The config bag as the Pulumi engine hands it to a program: every value a string."""
    # Any mocked run configures the runtime (stack name, project) the way the engine would.
    run_mocked_stack(fixture_stack("dev"))
    values = {
        "gcp:project": "p-123",
        "gcp:region": "us-east1",
        f"{NAMESPACE}:functionTimeoutSeconds": "60",
        f"{NAMESPACE}:deletionProtection": "false",
        f"{NAMESPACE}:jobHandler": DEMO_HANDLER,
        f"{NAMESPACE}:jobs": json.dumps([valid_job()]),
    }
    yield values
    runtime_config.set_all_config({})
