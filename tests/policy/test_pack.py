"""The pack as a whole: the template's fixture stacks pass it (applied and in preview), and Pulumi
can start it. Your own stacks are held to it by tests/test_fork_checks.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pulumi.output import Unknown
from pulumi_policy import EnforcementLevel

import tools.mocked_program as harness
from policy.scheduler_guardrails.policies import POLICIES
from policy.scheduler_guardrails.rules.config.github_oidc import Reach, reach
from tests.policy.stack_violations import judged_in_preview, stack_violations
from tests.support.optional import needs_proxy_kinds
from tests.support.stacks import dev_stack_resources, fixture_stack

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dev_resources() -> list[Any]:
    resources: list[Any] = dev_stack_resources()
    return resources


def test_dev_stack_passes_every_policy(dev_resources: list[Any]) -> None:
    types = {r.type for r in dev_resources}
    # The policies must actually have had something to look at.
    assert {
        "gcp:cloudscheduler/job:Job",
        "gcp:cloudfunctionsv2/function:Function",
        "gcp:firestore/field:Field",
        "gcp:storage/bucket:Bucket",
        "gcp:projects/iAMMember:IAMMember",
    } <= types
    assert stack_violations(dev_resources, preview=False) == []


def test_dev_stack_preview_with_unknown_outputs_passes(dev_resources: list[Any]) -> None:
    assert judged_in_preview(stack_violations(dev_resources, preview=True)) == []


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
def test_a_first_preview_runs_the_program_and_every_policy_cleanly(stack_name: str) -> None:
    """A first `pulumi preview`: the program runs with every computed output unknown (emails,
    members, URIs, service names, generations), and no policy fails or reports on them; but for
    the one advisory that says which timing rules wait for the job table, once for the function."""
    found = stack_violations(_first_preview(stack_name), preview=False)
    assert judged_in_preview(found) == []
    [notice] = found
    assert notice.startswith("scheduler-timing-advisories: function 'eos-function': the job table")


def _first_preview(stack_name: str, **changes: Any) -> list[harness.MockedResource]:
    """The fixture stack `stack_name` (its settings changed by `changes`) as a first preview
    declares it, as the engine sends it to the pack."""
    settings = dataclasses.replace(fixture_stack(stack_name), **changes)
    resources = harness.run_mocked_stack(settings, preview=True)
    members = [r.inputs["member"] for r in resources if "member" in r.inputs]
    assert members and all(isinstance(member, Unknown) for member in members)
    return [
        harness.MockedResource(
            r.type, r.name, r.urn, harness.as_policy_value(r.inputs), harness.as_policy_value(r.outputs)
        )
        for r in resources
    ]


def test_a_first_preview_judges_the_timing_that_needs_no_job_table() -> None:
    """The job table is in the function's source archive, which a first preview does not know:
    a retention shorter than the retries still is a violation there, not only on the update."""
    found = stack_violations(_first_preview("prod", retention_seconds=600.0), preview=False)
    assert any(
        v.startswith("scheduler-timing-invariants") and "[retention-outlives-retries]" in v for v in found
    )


def test_a_broken_dev_stack_is_caught(dev_resources: list[Any]) -> None:
    """Guards the two tests above against passing because nothing was checked."""
    broken = []
    for r in dev_resources:
        if r.type == "gcp:cloudfunctionsv2/function:Function":
            # Shorter than the deployed time limit: attempts would be ended after Cloud Run's timeout.
            service = dict(r.outputs["serviceConfig"]) | {"timeoutSeconds": 30.0}
            r = harness.MockedResource(
                r.type, r.name, r.urn, r.inputs, dict(r.outputs) | {"serviceConfig": service}
            )
        broken.append(r)
    found = stack_violations(broken, preview=False)
    assert any(
        v.startswith("scheduler-timing-invariants") and "[time-limit-before-timeout]" in v for v in found
    )


def test_policy_names_are_unique_and_levels_explicit() -> None:
    names = [p.name for p in POLICIES]
    assert len(names) == len(set(names))
    assert all(
        p.enforcement_level in (EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY) for p in POLICIES
    )


def test_pack_project_file_names_the_python_runtime_and_venv() -> None:
    text = (REPO_ROOT / "policy" / "PulumiPolicy.yaml").read_text()
    assert "name: python" in text and "virtualenv: venv" in text


# --- stacks with workflow jobs pass, and breaking them is caught -------------------------------


def _workflow_stack(workflow: dict[str, Any]) -> list[Any]:
    from tests.infra.conftest import build, valid_job, valid_values

    settings = build(valid_values(jobs=[valid_job(), valid_job(name="wf", workflow=workflow)]))
    resources: list[Any] = harness.run_mocked_stack(settings)
    return resources


@needs_proxy_kinds
@pytest.mark.parametrize(
    "workflow", [{"sample": True, "argument": {"a": 1}}, {"name": "projects/p/locations/l/workflows/w"}]
)
def test_workflow_job_stacks_pass_every_policy(workflow: dict[str, Any]) -> None:
    resources = _workflow_stack(workflow)
    assert any(
        r.type == "gcp:projects/iAMMember:IAMMember" and "workflows" in r.inputs["role"] for r in resources
    )
    assert stack_violations(resources, preview=False) == []
    assert judged_in_preview(stack_violations(resources, preview=True)) == []


@needs_proxy_kinds
def test_dev_stack_has_the_sample_workflow_the_policies_checked(dev_resources: list[Any]) -> None:
    types = {r.type for r in dev_resources}
    assert "gcp:workflows/workflow:Workflow" in types
    assert any(
        r.type == "gcp:cloudfunctionsv2/function:Function"
        and r.inputs["buildConfig"]["entryPoint"] == "check_idempotency_token"
        for r in dev_resources
    )


@needs_proxy_kinds
def test_a_broken_workflow_stack_is_caught() -> None:
    resources = _workflow_stack({"sample": True})
    # No TTL on the token collection, and the invoker account given workflows.invoker too.
    broken = [r for r in resources if r.name != "eos-tokens-ttl"]
    for r in resources:
        if r.name == "eos-runtime-workflows-invoker":
            member = f"serviceAccount:{r.outputs['member'].split(':', 1)[1].replace('runtime', 'invoker')}"
            broken.append(
                harness.MockedResource(
                    r.type,
                    "extra",
                    r.urn + "-extra",
                    r.inputs | {"member": member},
                    r.outputs | {"member": member},
                )
            )
    found = stack_violations(broken, preview=False)
    assert any(v.startswith("idempotency-collection-ttl: ") for v in found)
    assert any(v.startswith("project-role-holders: ") and "-invoker@" in v for v in found)


def test_a_function_building_as_the_default_identity_is_caught(dev_resources: list[Any]) -> None:
    # Each function the dev stack deploys: the handler, and the token check when a sample needs it.
    functions = [r.name for r in dev_resources if r.type == "gcp:cloudfunctionsv2/function:Function"]
    assert "eos-function" in functions
    broken = []
    for r in dev_resources:
        if r.type == "gcp:cloudfunctionsv2/function:Function":
            build = {k: v for k, v in r.inputs["buildConfig"].items() if k != "serviceAccount"}
            r = harness.MockedResource(
                r.type, r.name, r.urn, dict(r.inputs) | {"buildConfig": build}, r.outputs
            )
        broken.append(r)
    found = stack_violations(broken, preview=False)
    assert sum(v.startswith("function-build-service-account ") for v in found) == len(functions)


# --- GitHub OIDC principals: what each one admits --------------------------------------------

POOL = "projects/123/locations/global/workloadIdentityPools/github-actions"
SUBJECT = f"principal://iam.googleapis.com/{POOL}/subject/repo:acme/eos"


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        (f"{SUBJECT}:environment:prod", Reach.ENVIRONMENT),
        (f"{SUBJECT}:pull_request", Reach.PULL_REQUEST),
        (f"{SUBJECT}:ref:refs/heads/main", Reach.BROADER),
        # A customised subject that adds more after the environment is not taken for one.
        (f"{SUBJECT}:environment:prod:ref:x", Reach.BROADER),
        (f"principalSet://iam.googleapis.com/{POOL}/attribute.repository/acme/eos", Reach.BROADER),
        (f"principalSet://iam.googleapis.com/{POOL}/*", Reach.BROADER),
        ("serviceAccount:someone@acme.iam.gserviceaccount.com", None),
        ("user:alice@example.com", None),
    ],
)
def test_each_workload_identity_principal_admits_what_its_subject_says(
    member: str, expected: Reach | None
) -> None:
    assert reach(member) is expected
