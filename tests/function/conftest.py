"""Every function test starts with the sample jobs' recorded calls and hook empty; HTTP tests
start real Functions Framework servers with `start_server(**env)`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.function import sample_jobs
from tests.support.demo_runs import server_env


@pytest.fixture(autouse=True)
def clear_sample_jobs() -> Iterator[None]:
    sample_jobs.CALLS.clear()
    yield
    sample_jobs.DURING_JOB = None


@pytest.fixture
def start_server(function_servers, emulator_host, project):
    return lambda **extra: function_servers(server_env(emulator_host, project, **extra))
