"""The Workflows proxy, stack side: the optional sample workflow, the token check it calls, and the
project-level roles/workflows.invoker grant that exists only when a job uses the proxy."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
import yaml

from infra.component import REQUIRED_APIS
from infra.config.schema import REPO_ROOT
from infra.plan.audit_job import AUDIT_HANDLER
from infra.samples.workflows import SAMPLE_WORKFLOW_FILE
from policy.scheduler_guardrails.rules.targets.workflow import KIND as WORKFLOW_KIND
from policy.scheduler_guardrails.rules.targets.workflow import WORKFLOWS_HANDLER
from tests.infra.conftest import PROJECT, REGION, build, valid_job, valid_values
from tests.support.stack_tables import shipped_table, table_handlers
from tests.support.stacks import dev_stack_resources
from tools.mocked_program import MockedStack, mock_stack

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
JOB = "gcp:cloudscheduler/job:Job"
# The stack's own missed-run audit, beside every configured job.
AUDIT = {"eos-prod_missed-run-audit": AUDIT_HANDLER}
ACCOUNT = "gcp:serviceaccount/account:Account"
WORKFLOW = "gcp:workflows/workflow:Workflow"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
RUN_MEMBER = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
FIELD = "gcp:firestore/field:Field"
SERVICE = "gcp:projects/service:Service"
EXISTING = f"projects/{PROJECT}/locations/{REGION}/workflows/existing"


@pytest.fixture(scope="module")
def stack() -> MockedStack:
    return mock_stack(
        build(
            valid_values(
                jobs=[
                    valid_job(name="every-5"),
                    valid_job(name="report", workflow={"sample": True, "argument": {"kind": "daily"}}),
                ]
            )
        )
    )


def named(stack: MockedStack, type_: str, name: str) -> Any:
    return next(r for r in stack.of_type(type_) if r.name == name)


def email(stack: MockedStack, name: str) -> str:
    return str(named(stack, ACCOUNT, name).outputs["email"])


def workflows_grants(stack: MockedStack) -> list[Any]:
    return [r for r in stack.of_type(PROJECT_MEMBER) if r.inputs["role"] == "roles/workflows.invoker"]


# --- the grant, and the API, only with a job that uses the Workflows proxy --------------------


def test_without_a_workflow_job_there_is_no_grant_api_or_token_check() -> None:
    plain = mock_stack(build(valid_values()))
    assert workflows_grants(plain) == []
    assert set(WORKFLOW_KIND.apis).isdisjoint(r.inputs["service"] for r in plain.of_type(SERVICE))
    assert plain.of_type(WORKFLOW) == []
    assert len(plain.of_type(FUNCTION)) == 1
    assert {"tokenCheckUri", "sampleWorkflows"}.isdisjoint(plain.component_outputs)


def test_sample_workflow_job_gets_the_project_level_invoker_grant_for_the_runtime_account(
    stack: MockedStack,
) -> None:
    (grant,) = workflows_grants(stack)
    assert grant.inputs["member"] == f"serviceAccount:{email(stack, 'eos-runtime')}"
    assert grant.inputs["project"] == PROJECT
    assert "condition" not in grant.inputs
    services = sorted(r.inputs["service"] for r in stack.of_type(SERVICE))
    assert services == sorted((*REQUIRED_APIS, *WORKFLOW_KIND.apis))


@pytest.mark.parametrize(
    "job",
    [
        valid_job(name="sample", workflow={"sample": True}),
        valid_job(name="existing", workflow={"name": EXISTING}),
        valid_job(name="by-hand", handler=WORKFLOWS_HANDLER, body={"workflow": EXISTING}),
    ],
    ids=["sample", "existing", "by-hand"],
)
def test_a_workflow_job_enables_the_executions_api_before_its_first_run(job: dict[str, Any]) -> None:
    """The function starts executions through workflowexecutions.googleapis.com, which
    enabling workflows.googleapis.com does not enable; the job's first run needs both."""
    stack = mock_stack(build(valid_values(jobs=[job])))
    executions = next(
        r for r in stack.of_type(SERVICE) if r.inputs["service"] == "workflowexecutions.googleapis.com"
    )
    assert executions.inputs["disableOnDestroy"] is False
    scheduled = named(stack, JOB, f"eos-job-{job['name']}")
    assert executions.urn in stack.dependencies[scheduled.urn]


@pytest.mark.parametrize(
    "job",
    [
        valid_job(name="existing", workflow={"name": EXISTING}),
        valid_job(name="by-hand", handler=WORKFLOWS_HANDLER, body={"workflow": EXISTING}),
    ],
)
def test_existing_workflow_job_gets_the_grant_but_no_sample(job: dict[str, Any]) -> None:
    existing = mock_stack(build(valid_values(jobs=[job])))
    assert len(workflows_grants(existing)) == 1
    assert existing.of_type(WORKFLOW) == []
    assert len(existing.of_type(FUNCTION)) == 1  # no token check without a sample workflow
    assert not any(field.name == "eos-tokens-ttl" for field in existing.of_type(FIELD))
    body = json.loads(
        base64.b64decode(named(existing, JOB, f"eos-job-{job['name']}").inputs["httpTarget"]["body"])
    )
    assert body == {"workflow": EXISTING}
    handlers = table_handlers(shipped_table(existing.resources))
    assert handlers == {f"eos-prod_{job['name']}": WORKFLOWS_HANDLER, **AUDIT}


# --- the token-check function -----------------------------------------------------------------


def test_token_check_is_a_second_function_from_the_same_source(stack: MockedStack) -> None:
    main, token = named(stack, FUNCTION, "eos-function"), named(stack, FUNCTION, "eos-token-check")
    assert token.inputs["buildConfig"]["entryPoint"] == "check_idempotency_token"
    assert token.inputs["buildConfig"]["runtime"] == "python312"
    assert token.inputs["buildConfig"]["source"] == main.inputs["buildConfig"]["source"]
    assert len(stack.of_type("gcp:storage/bucketObject:BucketObject")) == 1
    service = token.inputs["serviceConfig"]
    # Its own account: Firestore only, never the scheduled function's workflows.invoker.
    assert service["serviceAccountEmail"] == email(stack, "eos-tokens") != email(stack, "eos-runtime")
    assert service["ingressSettings"] == "ALLOW_INTERNAL_ONLY"
    assert service["allTrafficOnLatestRevision"] is True
    assert service["environmentVariables"] == {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "FIRESTORE_DATABASE": "eos-prod-ledger",
        "IDEMPOTENCY_COLLECTION": "idempotency_tokens",
        "IDEMPOTENCY_RETENTION_SECONDS": "604800",
    }


def test_token_check_env_follows_config() -> None:
    settings = build(
        valid_values(
            idempotencyCollection="tokens_b",
            idempotencyRetentionSeconds=90000,
            jobs=[valid_job(workflow={"sample": True})],
        )
    )
    resources = mock_stack(settings)
    env = named(resources, FUNCTION, "eos-token-check").inputs["serviceConfig"]["environmentVariables"]
    assert (env["IDEMPOTENCY_COLLECTION"], env["IDEMPOTENCY_RETENTION_SECONDS"]) == ("tokens_b", "90000")
    assert named(resources, FIELD, "eos-tokens-ttl").inputs["collection"] == "tokens_b"


def test_token_records_get_a_ttl_field_exempt_from_indexing(stack: MockedStack) -> None:
    ttl = named(stack, FIELD, "eos-tokens-ttl")
    assert ttl.inputs == {
        "project": PROJECT,
        "database": "eos-prod-ledger",
        "collection": "idempotency_tokens",
        "field": "expire_at",
        "ttlConfig": {},
        "indexConfig": {},
    }


# --- the sample workflow and its account --------------------------------------------------------


def test_workflow_account_may_invoke_only_the_token_check(stack: MockedStack) -> None:
    workflow_email = email(stack, "eos-workflow")
    token = named(stack, FUNCTION, "eos-token-check")
    grants = [
        r
        for r in stack.resources
        if workflow_email in json.dumps(r.inputs, default=repr) and r.type != WORKFLOW
    ]
    # The account itself, and exactly one binding: run.invoker on the token check's service.
    binding = named(stack, RUN_MEMBER, "eos-workflow-run-invoker")
    assert [r.name for r in grants] == ["eos-workflow-run-invoker"]
    assert binding.inputs["role"] == "roles/run.invoker"
    assert binding.inputs["name"] == token.outputs["serviceConfig"]["service"]
    assert binding.inputs["member"] == f"serviceAccount:{workflow_email}"
    assert all(workflow_email not in r.inputs["member"] for r in stack.of_type(PROJECT_MEMBER))


def test_sample_workflow_properties(stack: MockedStack) -> None:
    workflow = stack.one(WORKFLOW)
    token_uri = named(stack, FUNCTION, "eos-token-check").outputs["serviceConfig"]["uri"]
    assert workflow.inputs["name"] == "eos-prod_report"
    assert (workflow.inputs["project"], workflow.inputs["region"]) == (PROJECT, REGION)
    assert workflow.inputs["serviceAccount"] == named(stack, ACCOUNT, "eos-workflow").outputs["name"]
    assert workflow.inputs["sourceContents"] == SAMPLE_WORKFLOW_FILE.read_text(encoding="utf-8")
    assert workflow.inputs["userEnvVars"] == {"TOKEN_CHECK_URL": token_uri}
    assert workflow.inputs["deletionProtection"] is False


def test_workflow_job_posts_to_the_dedup_function_with_the_workflow_in_its_body(stack: MockedStack) -> None:
    report = named(stack, JOB, "eos-job-report").inputs
    uri = named(stack, FUNCTION, "eos-function").outputs["serviceConfig"]["uri"]
    target = report["httpTarget"]
    assert target["uri"] == uri and "googleapis.com" not in target["uri"]
    assert target["oidcToken"] == {"serviceAccountEmail": email(stack, "eos-invoker"), "audience": uri}
    assert target["headers"]["Content-Type"] == "application/json"
    assert json.loads(base64.b64decode(target["body"])) == {
        "workflow": f"projects/{PROJECT}/locations/{REGION}/workflows/eos-prod_report",
        "argument": {"kind": "daily"},
    }
    handlers = table_handlers(shipped_table(stack.resources))
    assert handlers == {"eos-prod_report": WORKFLOWS_HANDLER, **AUDIT}


def test_component_outputs_name_the_token_check_and_the_workflows(stack: MockedStack) -> None:
    outputs = stack.component_outputs
    assert (
        outputs["tokenCheckUri"] == named(stack, FUNCTION, "eos-token-check").outputs["serviceConfig"]["uri"]
    )
    assert outputs["sampleWorkflows"] == {
        "report": f"projects/{PROJECT}/locations/{REGION}/workflows/eos-prod_report"
    }
    assert outputs["tokenCheckServiceAccount"] == email(stack, "eos-tokens")
    assert outputs["workflowServiceAccount"] == email(stack, "eos-workflow")


def test_two_sample_jobs_share_one_account_and_one_token_check() -> None:
    jobs = [valid_job(name=n, workflow={"sample": True}) for n in ("a", "b")]
    resources = mock_stack(build(valid_values(jobs=jobs)))
    assert sorted(r.inputs["name"] for r in resources.of_type(WORKFLOW)) == ["eos-prod_a", "eos-prod_b"]
    assert len(resources.of_type(FUNCTION)) == 2
    assert len([r for r in resources.of_type(ACCOUNT) if r.name == "eos-workflow"]) == 1
    assert len(workflows_grants(resources)) == 1


def test_dev_stack_deploys_the_workflow_proxy_demo() -> None:
    resources = dev_stack_resources()
    (workflow,) = [r for r in resources if r.type == WORKFLOW]
    assert workflow.inputs["name"] == "eos-dev_workflow-proxy-demo"
    assert len([r for r in resources if r.type == FUNCTION]) == 2


# --- the sample workflow's source ---------------------------------------------------------------


def sample_workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SAMPLE_WORKFLOW_FILE.read_text(encoding="utf-8"))
    return loaded


def steps_of(steps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: step for entry in steps for name, step in entry.items()}


def calls_in(value: Any) -> list[str]:
    """Every `call:` anywhere in a part of the workflow."""
    if isinstance(value, dict):
        own = [value["call"]] if isinstance(value.get("call"), str) else []
        return own + [call for item in value.values() for call in calls_in(item)]
    if isinstance(value, list):
        return [call for item in value for call in calls_in(item)]
    return []


TOKEN_CALL = "token_call"
EXECUTION_ID = '${sys.get_env("GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID")}'


def test_sample_workflow_checks_the_token_before_its_state_change_and_completes_it() -> None:
    main = sample_workflow()["main"]
    assert main["params"] == ["args"]
    order = [next(iter(step)) for step in main["steps"]]
    assert order.index("check_token") < order.index("skip_duplicate") < order.index("change_state")
    assert order.index("change_state") < order.index("complete_token")
    steps = steps_of(main["steps"])

    check = steps["check_token"]
    assert (check["call"], check["result"]) == (TOKEN_CALL, "check")
    assert check["args"]["body"] == {
        "action": "begin",
        "token": "${args.idempotency_key}",
        "fence": "${args.fence}",
        "scope": "change_state",
        "holder": EXECUTION_ID,  # a begin sent again is this execution's own
    }
    switch = steps["skip_duplicate"]["switch"][0]
    assert switch["condition"] == "${not check.first}"
    assert "return" in json.dumps(switch["steps"])

    complete = steps["complete_token"]
    assert complete["call"] == TOKEN_CALL
    assert complete["args"]["body"] == {
        "action": "complete",
        "token": "${args.idempotency_key}",
        "scope": "change_state",
        "holder": "${check.holder}",
        "result": "${result}",
    }
    text = SAMPLE_WORKFLOW_FILE.read_text(encoding="utf-8")
    assert "PLACEHOLDER" in text and "sys.log" not in text


def test_a_failed_state_change_releases_the_token_and_fails_the_execution() -> None:
    change = steps_of(sample_workflow()["main"]["steps"])["change_state"]
    assert "result" in json.dumps(change["try"]["steps"])
    handler = change["except"]
    on_failure = steps_of(handler["steps"])
    release = on_failure["release_token"]
    assert release["call"] == TOKEN_CALL
    assert release["args"]["body"] == {
        "action": "release",
        "token": "${args.idempotency_key}",
        "scope": "change_state",
        "holder": "${check.holder}",
    }
    assert list(on_failure)[-1] == "fail" and on_failure["fail"]["raise"] == f"${{{handler['as']}}}"


def test_every_token_call_is_retried_on_429_503_and_connection_errors_boundedly() -> None:
    """Workflows' http.default_retry_predicate retries 429, 502, 503, 504, connection errors
    and timeouts: the token check's 503 (Firestore failed, contention) is among them."""
    workflow = sample_workflow()
    assert set(calls_in(workflow["main"])) == {TOKEN_CALL}  # no token call bypasses the retry
    token_call = workflow[TOKEN_CALL]
    assert token_call["params"] == ["body"]
    post = steps_of(token_call["steps"])["post"]
    request = post["try"]
    assert request["call"] == "http.post"
    assert request["args"] == {
        "url": '${sys.get_env("TOKEN_CHECK_URL")}',
        "auth": {"type": "OIDC"},
        "body": "${body}",
    }
    retry = post["retry"]
    assert retry["predicate"] == "${http.default_retry_predicate}"
    assert 1 <= retry["max_retries"] <= 10
    backoff = retry["backoff"]
    assert 0 < backoff["initial_delay"] <= backoff["max_delay"] <= 60 and backoff["multiplier"] > 1
    assert steps_of(token_call["steps"])["answer"]["return"] == f"${{{request['result']}.body}}"


def test_the_proxy_page_shows_the_sample_workflow_verbatim() -> None:
    page = (REPO_ROOT / "docs" / "proxy.md").read_text(encoding="utf-8")
    proxy = page.split("<!-- section:proxy -->", 1)[1].split("<!-- /section:proxy -->", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", proxy, flags=re.S)
    assert SAMPLE_WORKFLOW_FILE.read_text(encoding="utf-8") in blocks
