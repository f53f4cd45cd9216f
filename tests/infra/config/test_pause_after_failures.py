"""`jobs[].pauseAfterFailures`: validated by key, carried to the function in its job table, and
watched by a metric and an alert that exist only in a stack some job of which sets it."""

from __future__ import annotations

import pytest

from exactly_once import log_fields
from exactly_once.config import FunctionConfig
from infra.monitoring import log_filters
from infra.monitoring.alerts import ALERTS
from infra.settings.environment import job_table
from policy.scheduler_guardrails.offline import violations
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values
from tests.support.stack_tables import shipped_table, stack_function_env
from tools.mocked_program import mock_stack

KEY = f"{NAMESPACE}:jobs[0].pauseAfterFailures"
METRIC = "gcp:logging/metric:Metric"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"


def test_a_pause_reaches_the_function_by_the_deployed_job_id_with_its_metric_and_alert() -> None:
    settings = build(valid_values(jobs=[valid_job(pauseAfterFailures=3), valid_job(name="other")]))
    pausing, other = settings.jobs
    assert (pausing.pause_after_failures, other.pause_after_failures) == (3, None)
    table = job_table(settings)
    assert table.jobs[settings.scheduler_job_id(pausing)].pause_after_failures == 3
    config = FunctionConfig.from_env(stack_function_env(settings))
    assert config.pause_after_failures == {settings.scheduler_job_id(pausing): 3}

    stack = mock_stack(settings)
    deployed = shipped_table(stack.resources)
    assert deployed.jobs[settings.scheduler_job_id(pausing)].pause_after_failures == 3
    metric = next(r for r in stack.of_type(METRIC) if r.name.endswith("-metric-failure-pauses"))
    assert (
        f'jsonPayload.{log_fields.EVENT}="{log_fields.JOB_PAUSED_AFTER_FAILURES}"' in metric.inputs["filter"]
    )
    alert = next(r for r in stack.of_type(ALERT) if r.name.endswith("-alert-failure-pauses"))
    condition = alert.inputs["conditions"][0]["conditionThreshold"]
    assert metric.inputs["name"] in condition["filter"]
    resources = [(r.type, r.name, r.inputs, r.outputs) for r in stack.resources]
    assert violations(resources) == []


def test_without_the_key_the_function_gets_none_and_the_stack_no_pause_metric_or_alert() -> None:
    settings = build(valid_values())
    assert all(policy.pause_after_failures is None for policy in job_table(settings).jobs.values())
    assert FunctionConfig.from_env(stack_function_env(settings)).pause_after_failures == {}
    stack = mock_stack(settings)
    names = [r.name for r in (*stack.of_type(METRIC), *stack.of_type(ALERT))]
    assert not [name for name in names if "failure-pauses" in name]
    assert len(stack.of_type(METRIC)) == len(log_filters.METRICS)
    assert len(stack.of_type(ALERT)) == len(ALERTS)


@pytest.mark.parametrize("value", [0, -2, 1.5, True, "3", None, [2]])
def test_a_pause_must_be_a_whole_number_of_runs_named_with_its_job(value: object) -> None:
    message = error_of(valid_values(jobs=[valid_job(pauseAfterFailures=value)]))
    assert (
        f"{KEY}: job 'every-5': expected a whole number of failed runs, at least 1, got {value!r}" in message
    )
