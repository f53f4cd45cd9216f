"""The proxy targets as the conformance suite sees them: one adapter per kind, over its loopback
fake, saying how the kind is configured, what it has started and what each scripted failure
looks like on its wire (REST statuses for Cloud Run and BigQuery, gRPC codes for Workflows).

What differs between the kinds in behaviour is declared, not branched on in the scenarios:
`finds_its_start` (a retry finds what an earlier attempt started, by its run: Cloud Run by
searching the executions for RUN_ID, BigQuery by the job id derived from the run) and
`retry_start_calls` (the start calls a retry makes when the run's start already exists).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import grpc

from exactly_once.targets.bigquery_job_spec import BIGQUERY_JOBS_ENV, bigquery_job_id
from exactly_once.targets.cloud_run_job_spec import CLOUD_RUN_JOBS_ENV
from tests.support.fake_bigquery import FakeBigQuery
from tests.support.fake_cloud_run import FakeCloudRun
from tests.support.fake_workflows import FakeWorkflows
from tests.support.loopback_fake import HELD, LoopbackFake
from tests.support.proxy_runs import JOB_NAME, RUN_ID, proxy_env

CLOUD_RUN_JOB = "projects/acme/locations/europe-west1/jobs/nightly-export"
CLOUD_RUN_JOB_SPEC = {
    "job": CLOUD_RUN_JOB,
    "args": ["--export", "daily"],
    "env": {"TARGET": "warehouse"},
    "taskCount": 2,
}

QUERY = "SELECT @run_id AS run_id, @schedule_time AS scheduled, COUNT(*) AS n FROM `acme-data.sales.orders`"
QUERY_JOB = {
    "project": "acme-data",
    "location": "EU",
    "query": QUERY,
    "destinationTable": "acme-data.reports.daily",
    "writeDisposition": "WRITE_APPEND",
    "labels": {"team": "reports"},
}
BIGQUERY_JOB_ID = bigquery_job_id(JOB_NAME, RUN_ID)
BIGQUERY_OUTPUT_NAME = f"acme-data:EU.{BIGQUERY_JOB_ID}"

WORKFLOWS_HANDLER = "jobs.workflows:start_workflow_execution"
CLOUD_RUN_HANDLER = "jobs.cloud_run_job:run_cloud_run_job"
BIGQUERY_HANDLER = "jobs.bigquery_job:run_bigquery_job"
WORKFLOW = "projects/acme/locations/europe-west1/workflows/nightly-report"
WORKFLOW_BODY = {"workflow": WORKFLOW, "argument": {"report": "daily", "limit": 10}}


@dataclass(frozen=True)
class Failure:
    """A scripted failure of the target's API. `reaches_start`: the failing call is a start
    call (not the search before it)."""

    id: str
    script: list[Any]
    reaches_start: bool = True


@dataclass(frozen=True)
class Refusal:
    """A start refused for good; `named` appears in the run's recorded error."""

    id: str
    script: list[Any]
    named: str


@dataclass(frozen=True)
class HeldCall:
    """A call whose answer never comes; the released error names `call` and `timeout`.
    `starts`: the held call is the one that starts the run (it takes effect)."""

    id: str
    script: list[Any]
    call: str
    timeout: str
    starts: bool


class ProxyKind:
    """One proxy target kind over its fake. A subclass fills in the class tables and reads
    its fake; `env` is the function's environment selecting it for JOB_NAME."""

    kind: ClassVar[str]
    body: ClassVar[dict[str, Any]] = {}  # a valid delivery body
    run_key: ClassVar[str] = RUN_ID  # what every start call carries to name the run
    finds_its_start: ClassVar[bool]
    retry_start_calls: ClassVar[int]
    burst: ClassVar[int] = 8
    transient: ClassVar[tuple[Failure, ...]]
    lost_answer: ClassVar[tuple[Any, ...]]  # the script: a start takes effect, its answer is lost
    refusals: ClassVar[tuple[Refusal, ...]]
    held_calls: ClassVar[tuple[HeldCall, ...]]
    refused_bodies: ClassVar[tuple[dict[str, Any], ...]]

    fake: LoopbackFake[Any]

    def env(self, emulator_host: str, project: str, **extra: str) -> dict[str, str]:
        raise NotImplementedError

    def started(self) -> list[Any]:
        """What the target has started for any run."""
        raise NotImplementedError

    def start_calls(self) -> list[Any]:
        """Every start call the fake received, answered or not."""
        raise NotImplementedError

    def key_of(self, start_call: Any) -> str:
        """What a start call carries to name its run."""
        raise NotImplementedError

    def fence_of(self, start_call: Any) -> int | None:
        """The fence a start call carries (None: the kind carries none)."""
        return None

    def output(self, *, reused: bool) -> dict[str, Any]:
        """A reply's output naming the run's one start."""
        raise NotImplementedError

    @property
    def failures(self) -> list[Any]:
        return self.fake.script

    def wire_calls(self) -> int:
        with self.fake.lock:
            return len(self.fake.requests)

    def start_keys(self) -> list[str]:
        return [self.key_of(call) for call in self.start_calls()]

    def start_fences(self) -> list[int | None]:
        return [self.fence_of(call) for call in self.start_calls()]


class CloudRunJob(ProxyKind):
    kind = "cloud_run_job"
    finds_its_start = True
    retry_start_calls = 0  # the search finds the execution: nothing is run again
    transient = (Failure("503", [503], reaches_start=False),)  # the search fails: nothing is run
    lost_answer = (None, ("lost", 503))  # the search goes through, the run's answer is lost
    refusals = (Refusal("403", [None, 403], "403"),)  # the search goes through, jobs.run is refused
    held_calls = (
        HeldCall("search", [HELD], f"listing the executions of {CLOUD_RUN_JOB}", "Timeout", starts=False),
        HeldCall("run", [None, HELD], f"running {CLOUD_RUN_JOB}", "Timeout", starts=True),
    )
    refused_bodies = ({"job": CLOUD_RUN_JOB}, {"anything": 1})

    def __init__(self) -> None:
        self.fake: FakeCloudRun = FakeCloudRun(jobs={CLOUD_RUN_JOB})

    def env(self, emulator_host: str, project: str, **extra: str) -> dict[str, str]:
        spec = json.dumps({JOB_NAME: CLOUD_RUN_JOB_SPEC})
        return proxy_env(
            emulator_host,
            project,
            CLOUD_RUN_HANDLER,
            CLOUD_RUN_API_ENDPOINT=self.fake.endpoint,
            **{CLOUD_RUN_JOBS_ENV: spec, **extra},
        )

    def started(self) -> list[dict[str, Any]]:
        return self.fake.started(CLOUD_RUN_JOB)

    def start_calls(self) -> list[dict[str, Any]]:
        with self.fake.lock:
            return [
                r.json()
                for r in self.fake.requests
                if (r.method, r.path) == ("POST", f"/v2/{CLOUD_RUN_JOB}:run")
            ]

    def _env_of(self, run_request: dict[str, Any]) -> dict[str, str]:
        (container,) = run_request["overrides"]["containerOverrides"]
        return {item["name"]: item["value"] for item in container["env"]}

    def key_of(self, start_call: dict[str, Any]) -> str:
        return self._env_of(start_call)["RUN_ID"]

    def fence_of(self, start_call: dict[str, Any]) -> int | None:
        return int(self._env_of(start_call)["FENCE"])

    def output(self, *, reused: bool) -> dict[str, Any]:
        (execution,) = self.started()
        return {"execution": execution["name"], "reused": reused}


class BigQueryJob(ProxyKind):
    kind = "bigquery"
    run_key = BIGQUERY_JOB_ID
    finds_its_start = True
    retry_start_calls = 1  # the insert again, refused as a duplicate id; the job is read back
    transient = (Failure("503", [503]),)
    lost_answer = (("lost", 503),)
    refusals = (Refusal("400", [400], "400"), Refusal("403", [403], "403"))
    held_calls = (
        HeldCall("insert", [HELD], f"starting BigQuery job {BIGQUERY_JOB_ID}", "Timeout", starts=True),
    )
    refused_bodies = ({"query": "DROP TABLE x"},)

    def __init__(self) -> None:
        self.fake: FakeBigQuery = FakeBigQuery()

    def env(self, emulator_host: str, project: str, **extra: str) -> dict[str, str]:
        table = json.dumps({JOB_NAME: QUERY_JOB})
        return proxy_env(
            emulator_host,
            project,
            BIGQUERY_HANDLER,
            BIGQUERY_API_ENDPOINT=self.fake.endpoint,
            **{BIGQUERY_JOBS_ENV: table, **extra},
        )

    def started(self) -> list[dict[str, Any]]:
        return self.fake.created()

    def start_calls(self) -> list[dict[str, Any]]:
        with self.fake.lock:
            return [r.json() for r in self.fake.requests if r.method == "POST" and r.path.endswith("/jobs")]

    def key_of(self, start_call: dict[str, Any]) -> str:
        return str(start_call["jobReference"]["jobId"])

    def output(self, *, reused: bool) -> dict[str, Any]:
        return {"job": BIGQUERY_OUTPUT_NAME, "state": "RUNNING", "reused": reused}


class WorkflowsExecution(ProxyKind):
    kind = "workflows"
    body = WORKFLOW_BODY
    # No search: a retry after a start whose answer was lost starts a second execution with
    # the same token, and the workflow's token check lets one act.
    finds_its_start = False
    retry_start_calls = 1
    burst = 24
    transient = tuple(
        Failure(code.name, [code])
        for code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.ABORTED,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
    )
    lost_answer = (("lost", grpc.StatusCode.UNAVAILABLE),)
    refusals = tuple(
        Refusal(code.name, [code], code.name)
        for code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED)
    )
    held_calls = (
        HeldCall("create", [HELD], f"starting an execution of {WORKFLOW}", "DeadlineExceeded", starts=True),
    )
    refused_bodies = (
        {},
        {"workflow": "nightly-report"},
        {"workflow": WORKFLOW, "argument": [1, 2]},
        {"workflow": WORKFLOW, "argumnet": {}},
        {"workflow": WORKFLOW, "argument": {"blob": "x" * 40_000}},
    )

    def __init__(self) -> None:
        self.fake: FakeWorkflows = FakeWorkflows()

    def env(self, emulator_host: str, project: str, **extra: str) -> dict[str, str]:
        return proxy_env(
            emulator_host, project, WORKFLOWS_HANDLER, WORKFLOWS_API_ENDPOINT=self.fake.endpoint, **extra
        )

    def started(self) -> list[Any]:
        with self.fake.lock:
            return list(self.fake.started)

    def start_calls(self) -> list[dict[str, Any]]:
        with self.fake.lock:
            return [json.loads(request.execution.argument) for request in self.fake.requests]

    def key_of(self, start_call: dict[str, Any]) -> str:
        return str(start_call["idempotency_key"])

    def fence_of(self, start_call: dict[str, Any]) -> int | None:
        return int(start_call["fence"])

    def output(self, *, reused: bool) -> dict[str, Any]:
        return {"execution": self.started()[-1].name}


KINDS: dict[str, type[ProxyKind]] = {
    kind.kind: kind for kind in (CloudRunJob, BigQueryJob, WorkflowsExecution)
}


def serving(kind: str) -> Iterator[ProxyKind]:
    """A started adapter of `kind`, its fake stopped after."""
    proxy = KINDS[kind]()
    with proxy.fake:
        yield proxy
