"""Pause and catch-up as the stack deploys them, under Pulumi mocks: the Scheduler job's
`paused` always set from the config, and a catch-up job's queue, its two grants, the API and
the audit's configuration naming where deliveries go."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from exactly_once.audit.config import AuditConfig, CatchupRuns, Redelivery
from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER, PROJECT_HEADER, parse_rfc3339
from infra.plan.catchup import function_url, queue_path
from infra.plan.needs import CLOUD_TASKS_API
from policy.scheduler_guardrails.rules.config.grants import CATCHUP_ACTS_AS_INVOKER, CATCHUP_ENQUEUER
from tests.infra.conftest import PROJECT, REGION, build, valid_job, valid_values
from tests.support.stack_tables import shipped_table
from tools.mocked_program import STATIC, MockedStack, mock_stack

JOB = "gcp:cloudscheduler/job:Job"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
QUEUE = "gcp:cloudtasks/queue:Queue"
QUEUE_MEMBER = "gcp:cloudtasks/queueIamMember:QueueIamMember"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
SERVICE = "gcp:projects/service:Service"


def _stack(*jobs: dict[str, object]) -> MockedStack:
    return mock_stack(build(valid_values(jobs=list(jobs))))


@pytest.fixture(scope="module")
def catching_up() -> MockedStack:
    return _stack(
        valid_job(name="paused-one", paused=True),
        valid_job(name="nightly", schedule="0 3 * * *", body={"day": 1}, catchup={"windowSeconds": 86400}),
    )


def _scheduler_job(stack: MockedStack, name: str) -> dict[str, Any]:
    return next(r.inputs for r in stack.of_type(JOB) if str(r.inputs["name"]).endswith(f"_{name}"))


def _audit_config(stack: MockedStack) -> AuditConfig:
    table = shipped_table(stack.resources)
    assert table.audit is not None
    return AuditConfig.from_raw(table.audit)


def _member(stack: MockedStack, account: str) -> str:
    email = next(str(r.outputs["email"]) for r in stack.of_type(ACCOUNT) if r.name.endswith(f"-{account}"))
    return f"serviceAccount:{email}"


def test_paused_true_pauses_the_scheduler_job_and_unset_is_explicitly_running(catching_up) -> None:
    assert _scheduler_job(catching_up, "paused-one")["paused"] is True
    # Unset is sent as false, never left out: a `pulumi up` resumes a job paused by hand
    # instead of leaving the config and the job disagreeing.
    assert _scheduler_job(catching_up, "nightly")["paused"] is False
    assert _scheduler_job(catching_up, "missed-run-audit")["paused"] is False


def test_the_audit_is_told_which_jobs_are_paused(catching_up) -> None:
    config = _audit_config(catching_up)
    paused = {job.name.rsplit("_", 1)[-1]: job.paused for job in config.jobs}
    assert paused == {"paused-one": True, "nightly": False, "missed-run-audit": False}


def test_a_catchup_job_gets_a_queue_its_grants_and_the_api(catching_up) -> None:
    settings = build(valid_values(jobs=[valid_job(name="nightly", catchup={"windowSeconds": 86400})]))
    queue = catching_up.one(QUEUE)
    created = parse_rfc3339(catching_up.named(STATIC, "eos-catchup-queue-created").outputs["rfc3339"])
    assert queue.inputs["name"] == settings.names.task_queue_id(int(created.timestamp()))
    assert (queue.inputs["project"], queue.inputs["location"]) == (PROJECT, REGION)
    runtime = _member(catching_up, "runtime")
    (enqueuer,) = catching_up.of_type(QUEUE_MEMBER)
    assert (enqueuer.inputs["role"], enqueuer.inputs["member"]) == (CATCHUP_ENQUEUER.role, runtime)
    assert enqueuer.inputs["name"] == queue.outputs["name"]
    (act_as,) = catching_up.of_type(ACCOUNT_MEMBER)
    assert (act_as.inputs["role"], act_as.inputs["member"]) == (CATCHUP_ACTS_AS_INVOKER.role, runtime)
    invoker = next(r for r in catching_up.of_type(ACCOUNT) if r.name.endswith("-invoker"))
    assert act_as.inputs["serviceAccountId"] == invoker.outputs["name"]
    assert CLOUD_TASKS_API in {r.inputs["service"] for r in catching_up.of_type(SERVICE)}


def test_the_audit_delivers_through_the_queue_as_the_invoker_with_the_jobs_own_headers(catching_up) -> None:
    settings = build(valid_values(jobs=[valid_job(name="nightly", catchup={"windowSeconds": 86400})]))
    config = _audit_config(catching_up)
    invoker_email = _member(catching_up, "invoker").removeprefix("serviceAccount:")
    # One region: the one redelivery every function uses, naming no region.
    assert config.redeliveries == (
        Redelivery(
            url=function_url(settings),
            queue=queue_path(settings, catching_up.one(QUEUE).outputs["name"]),
            invoker=invoker_email,
        ),
    )
    nightly = next(job for job in config.jobs if job.name.endswith("_nightly"))
    assert nightly.catchup is not None and nightly.catchup.window_seconds == 86400
    assert nightly.catchup.runs is CatchupRuns.ALL
    assert nightly.delivery is not None
    assert nightly.delivery.headers[JOB_NAME_HEADER] == nightly.name
    assert nightly.delivery.headers[PROJECT_HEADER] == PROJECT
    assert json.loads(nightly.delivery.body) == {"day": 1}
    # The Scheduler job sends the very same body.
    scheduled = _scheduler_job(catching_up, "nightly")["httpTarget"]["body"]
    assert base64.b64decode(scheduled) == nightly.delivery.body
    assert nightly.delivery.deadline_seconds == 60


def test_no_queue_and_no_redelivery_without_a_catchup_job() -> None:
    stack = _stack(valid_job(name="plain"))
    assert stack.of_type(QUEUE) == [] and stack.of_type(QUEUE_MEMBER) == []
    assert not [r for r in stack.of_type(STATIC) if r.name.endswith("-catchup-queue-created")]
    assert CLOUD_TASKS_API not in {r.inputs["service"] for r in stack.of_type(SERVICE)}
    assert _audit_config(stack).redeliveries == ()
