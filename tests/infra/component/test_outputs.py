"""The stack's outputs, for every combination of samples: one list decides what the component
registers and the program exports, so a stack never exports a null for a sample it lacks."""

from __future__ import annotations

import pytest

from infra.plan.outputs import STACK_OUTPUTS
from tests.infra.conftest import build, valid_job, valid_values
from tests.support.optional import needs_proxy_kinds
from tools.mocked_program import mock_stack

ALWAYS = {o.name for o in STACK_OUTPUTS if o.only_with is None}
TOKEN_CHECK = {"tokenCheckUri", "tokenCheckServiceAccount"}
WORKFLOW = {"workflowServiceAccount", "sampleWorkflows"}

SAMPLE_WORKFLOW = {"workflow": {"sample": True}}
SAMPLE_CLOUD_RUN_JOB = {"cloudRunJob": {"sample": True}}
SAMPLE_BIGQUERY = {"bigquery": {"sample": True}}


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param([], ALWAYS, id="none"),
        # The samples of the target kinds, where the kinds are present.
        pytest.param(
            [SAMPLE_WORKFLOW], ALWAYS | TOKEN_CHECK | WORKFLOW, id="workflow", marks=needs_proxy_kinds
        ),
        pytest.param(
            [SAMPLE_CLOUD_RUN_JOB], ALWAYS | TOKEN_CHECK, id="cloud-run-job", marks=needs_proxy_kinds
        ),
        pytest.param([SAMPLE_BIGQUERY], ALWAYS, id="bigquery", marks=needs_proxy_kinds),
        pytest.param(
            [SAMPLE_WORKFLOW, SAMPLE_CLOUD_RUN_JOB, SAMPLE_BIGQUERY],
            ALWAYS | TOKEN_CHECK | WORKFLOW,
            id="all",
            marks=needs_proxy_kinds,
        ),
    ],
)
def test_each_sample_combination_registers_exactly_its_outputs(samples, expected) -> None:
    jobs = [valid_job(name="plain")] + [valid_job(name=f"sample-{i}", **s) for i, s in enumerate(samples)]
    values = valid_values(jobs=jobs)
    if SAMPLE_CLOUD_RUN_JOB in samples:
        values["ingress"] = "ALLOW_ALL"
    outputs = mock_stack(build(values)).component_outputs
    assert set(outputs) == expected
    assert all(value is not None for value in outputs.values())
