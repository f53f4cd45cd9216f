"""The dev stack's function on a real Functions Framework server and the Firestore emulator,
with the missed-run audit job added the way the stack adds it, and a runner for the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from infra.config.schema import REPO_ROOT
from infra.plan.audit_job import with_audit_job
from infra.plan.headers import delivery_headers, headers_for
from infra.settings.environment import function_environment
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from jobs.demo import EXECUTIONS_COLLECTION
from localrun.function_server import FunctionServer
from localrun.server_forks import run_module
from tests.ops.fakes import FakeGoogleApis, FakeJob
from tests.support.stack_tables import audit_table_env
from tests.support.stacks import FIXTURE_STACKS, demo_job, fixture_stack

STACK = "dev"


@dataclass(frozen=True)
class Cli:
    """`python -m ops` as an operator runs it, pointed at this test's emulator project: a
    process of its own, forked from one that imported its libraries (localrun/server_forks.py)."""

    emulator_host: str
    firestore_project: str
    # Where its --stack is read from: the template's fixture stacks, or a test's own.
    stacks_dir: Path = FIXTURE_STACKS

    def __call__(
        self, *args: str, stack: str = STACK, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "FIRESTORE_EMULATOR_HOST": self.emulator_host, **(extra_env or {})}
        storage = ["--firestore-project", self.firestore_project, "--database", "(default)"]
        storage += ["--stacks-dir", str(self.stacks_dir)]
        return run_module("ops", [*args, "--stack", stack, *storage], env, REPO_ROOT, timeout=300)


@dataclass(frozen=True)
class DevFunction:
    settings: StackSettings
    server: FunctionServer
    db: firestore.Client
    log_path: Path

    @property
    def demo(self) -> JobSettings:
        return demo_job(self.settings)

    def deliver(
        self, job: JobSettings, schedule_time: datetime, body: bytes | None = None
    ) -> requests.Response:
        """One delivery exactly as Cloud Scheduler sends it (with another `body`, if given)."""
        return requests.post(
            self.server.url,
            headers=delivery_headers(self.settings, job, schedule_time),
            data=body if body is not None else job.body_bytes() or b"",
            timeout=120,
        )

    def executions(self, job: JobSettings) -> list[dict[str, Any]]:
        query = self.db.collection(EXECUTIONS_COLLECTION).where(
            filter=FieldFilter("job_name", "==", self.settings.scheduler_job_id(job))
        )
        return [doc.to_dict() or {} for doc in query.stream()]

    def log_lines(self) -> list[dict[str, object]]:
        """Every structured line the function wrote to stdout (other output skipped)."""
        lines = []
        for text in self.log_path.read_text(errors="replace").splitlines():
            if text.startswith("{"):
                lines.append(json.loads(text))
        return lines


@pytest.fixture
def dev_settings() -> StackSettings:
    return with_audit_job(fixture_stack(STACK))


def serve_dev_function(
    function_servers,
    settings: StackSettings,
    emulator_host: str,
    project: str,
    db,
    log_path,
    service: str | None = None,
    region: str | None = None,
) -> DevFunction:
    """The dev stack's function with the audit job; `service` is the K_SERVICE Cloud Run would
    set, which names the target recorded with each run (none: a function outside Cloud Run);
    `region`, the region it serves in, of a two-region stack."""
    env = {
        **function_environment(settings, region),
        **audit_table_env(settings),
        "GOOGLE_CLOUD_PROJECT": project,
        "FIRESTORE_DATABASE": "(default)",
        "FIRESTORE_EMULATOR_HOST": emulator_host,
    }
    if service is not None:
        env["K_SERVICE"] = service
    return DevFunction(settings, function_servers(env), db, log_path)


@pytest.fixture
def dev_function(function_servers, emulator_host, project, db, log_path, dev_settings) -> DevFunction:
    return serve_dev_function(function_servers, dev_settings, emulator_host, project, db, log_path)


@pytest.fixture
def cli(emulator_host, project) -> Cli:
    return Cli(emulator_host, project)


@pytest.fixture
def apis() -> Iterator[FakeGoogleApis]:
    """The loopback Cloud Scheduler and Firestore admin fakes, served for the test."""
    fake = FakeGoogleApis().start()
    yield fake
    fake.stop()


def deploy_jobs(apis: FakeGoogleApis, function: DevFunction, uri: str | None = None) -> None:
    """Register every job of the stack with the fake Scheduler, as `pulumi up` creates them,
    targeting `uri` (by default the served function)."""
    settings = function.settings
    for job in settings.jobs:
        name = (
            f"projects/{settings.project}/locations/{settings.region}/jobs/{settings.scheduler_job_id(job)}"
        )
        apis.jobs[name] = FakeJob(
            uri or function.server.url,
            headers_for(settings, job),
            job.body_bytes() or b"",
            schedule=job.schedule,
            time_zone=job.time_zone,
        )
