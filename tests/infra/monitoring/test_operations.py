"""The stack's monitoring under Pulumi mocks: metrics, alert policies, the dashboard and the
audit job exist, are named per stack, agree with the function's log lines, and pass the pack."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pulumi
import pytest

from exactly_once import log_fields
from exactly_once.audit.config import AuditConfig
from exactly_once.delivery.outcomes import Outcome
from infra.config.schema import REPO_ROOT, project_name
from infra.monitoring import log_filters
from infra.monitoring.operations import (
    ALERTS,
    DASHBOARD_FILE,
    declare_operations,
    without_defaults,
)
from infra.plan.audit_job import AUDIT_HANDLER, audit_environment, with_audit_job
from infra.resources.function import audit_function_environment
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.loading import load_stack_settings
from tests.policy.runner import violations
from tests.support import pulumi_harness as harness

METRIC = "gcp:logging/metric:Metric"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
SERVICE = "projects/acme/locations/us-central1/services/eos-dev-handler"
CHANNELS = ("projects/acme/notificationChannels/123",)


def declared_stack(prefix: str = "eos-dev", channels=CHANNELS, preview: bool = False) -> harness.MockedStack:
    """Every resource declare_operations registers outside a stack, with their dependencies."""

    def program() -> pulumi.Output[Any]:
        operations = declare_operations(
            prefix, project="acme", function_service=SERVICE, notification_channels=channels
        )
        return pulumi.Output.all(
            *(metric.name for metric in operations.metrics.values()),
            *(policy.display_name for policy in operations.alert_policies.values()),
            operations.dashboard.dashboard_json,
            operations.metric_types_ready.id,
        )

    resources, monitor, _ = harness.run_under_mocks(
        program,
        harness.GcpMocks("acme", preview=preview),
        project=project_name(),
        stack="dev",
        preview=preview,
    )
    return harness.MockedStack(resources, {}, dependencies=monitor.dependencies)


def declared(
    prefix: str = "eos-dev", channels=CHANNELS, preview: bool = False
) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, name, inputs) of every resource declare_operations registers, outside a stack."""
    return [(r.type, r.name, r.inputs) for r in declared_stack(prefix, channels, preview).resources]


def of_type(resources, type_: str) -> list[dict[str, Any]]:
    return [inputs for typ, _, inputs in resources if typ == type_]


def test_deliveries_are_counted_by_outcome_and_job() -> None:
    metrics = {m["name"]: m for m in of_type(declared(), METRIC)}
    assert set(metrics) == {
        "eos-dev-deliveries",
        "eos-dev-delivery-latency",
        "eos-dev-missed-runs",
        "eos-dev-ended-attempts",
    }
    deliveries = metrics["eos-dev-deliveries"]
    assert deliveries["labelExtractors"] == {
        "outcome": "EXTRACT(jsonPayload.outcome)",
        "job": "EXTRACT(jsonPayload.job)",
    }
    assert [label["key"] for label in deliveries["metricDescriptor"]["labels"]] == ["outcome", "job"]
    assert deliveries["filter"] == (
        'resource.type="cloud_run_revision" AND resource.labels.service_name="eos-dev-handler" '
        "AND jsonPayload.outcome:*"
    )
    latency = metrics["eos-dev-delivery-latency"]
    assert latency["valueExtractor"] == "EXTRACT(jsonPayload.latency_ms)"
    assert latency["metricDescriptor"]["valueType"] == "DISTRIBUTION"
    assert "bucketOptions" in latency
    assert 'jsonPayload.event="missed_run"' in metrics["eos-dev-missed-runs"]["filter"]
    ended = metrics["eos-dev-ended-attempts"]
    assert 'jsonPayload.event="attempt_ended"' in ended["filter"]
    assert ended["labelExtractors"] == {
        "cause": "EXTRACT(jsonPayload.cause)",
        "job": "EXTRACT(jsonPayload.job)",
    }


def test_the_metrics_use_the_field_names_the_function_writes() -> None:
    for metric in log_filters.METRICS:
        for name in (*metric.present, *metric.equals, *metric.labels):
            assert name in vars(log_fields).values()
    watched = [alert.label_filter["outcome"] for alert in ALERTS if alert.metric is log_filters.DELIVERIES]
    assert len(watched) == 6
    assert set(watched) <= {o.value for o in Outcome}


def test_alert_policies_name_the_outcomes_and_carry_a_runbook() -> None:
    policies = of_type(declared(), ALERT)
    assert len(policies) == len(ALERTS) == 8
    names = " | ".join(p["displayName"] for p in policies)
    for needle in (
        "lease_lost",
        "store_error",
        "internal_error",
        "failed_terminal",
        "failed_released",
        "wrong_target",
        "missed run",
        "attempt ended",
    ):
        assert needle in names
    # Policies register once their metric's name resolves, in no fixed order.
    by_key = {
        alert.key: next(p for p in policies if p["displayName"].endswith(alert.title)) for alert in ALERTS
    }
    lease = by_key["lease_lost"]["conditions"][0]["conditionThreshold"]
    assert lease["filter"] == (
        'metric.type="logging.googleapis.com/user/eos-dev-deliveries" AND '
        'resource.type="cloud_run_revision" AND metric.label.outcome="lease_lost"'
    )
    refused = by_key["wrong_target"]["conditions"][0]["conditionThreshold"]
    assert refused["filter"].endswith('metric.label.outcome="wrong_target"')
    assert (refused["thresholdValue"], by_key["wrong_target"]["severity"]) == (0, "ERROR")
    missed = by_key["missed-runs"]["conditions"][0]["conditionThreshold"]
    assert 'metric.type="logging.googleapis.com/user/eos-dev-missed-runs"' in missed["filter"]
    assert by_key["failed_released"]["conditions"][0]["conditionThreshold"]["thresholdValue"] == 2
    for policy in policies:
        assert policy["notificationChannels"] == list(CHANNELS)
        content = policy["documentation"]["content"]
        assert "**What it means.**" in content and "**Runbook.**" in content


def test_without_channels_the_policies_still_exist() -> None:
    policies = of_type(declared(channels=()), ALERT)
    assert len(policies) == len(ALERTS)
    assert all(not p.get("notificationChannels") for p in policies)


def test_the_dashboard_is_the_repository_json_with_this_stacks_metrics() -> None:
    (dashboard,) = of_type(declared(), DASHBOARD)
    body = json.loads(dashboard["dashboardJson"])
    assert body["displayName"] == "Exactly-once scheduler (eos-dev)"
    titles = [tile["widget"]["title"] for tile in body["mosaicLayout"]["tiles"]]
    for needle in (
        "Executions",
        "duplicates",
        "takeovers",
        "Failures",
        "latency p50",
        "latency p95",
        "Missed",
    ):
        assert any(needle in title for title in titles), needle
    filters = json.dumps(body)
    assert "logging.googleapis.com/user/eos-dev-deliveries" in filters
    assert "${" not in filters


def test_the_dashboard_is_written_as_the_monitoring_api_stores_it() -> None:
    """The API leaves out fields holding their default (xPos/yPos 0 above all) and answers
    without them; anything it would drop makes every later preview show a change."""
    (dashboard,) = of_type(declared(), DASHBOARD)
    body = json.loads(dashboard["dashboardJson"])
    assert without_defaults(body) == body
    tiles = body["mosaicLayout"]["tiles"]
    assert all(tile.get("xPos", 1) != 0 and tile.get("yPos", 1) != 0 for tile in tiles)
    # The tiles at the left edge and the top row are there, without their zero positions.
    assert sum("xPos" not in tile for tile in tiles) == 4 and sum("yPos" not in tile for tile in tiles) == 2
    assert '"xPos": 0' not in DASHBOARD_FILE.read_text() and '"yPos": 0' not in DASHBOARD_FILE.read_text()


def test_a_forks_zero_positions_and_empty_lists_are_left_out_but_set_messages_stay() -> None:
    chart = {"xPos": 0, "yPos": 0, "width": 6, "widget": {"title": "", "xyChart": {"thresholds": []}}}
    spacer = {"xPos": 6, "yPos": 0.0, "width": 6, "widget": {"blank": {}}}
    assert without_defaults({"mosaicLayout": {"columns": 12, "tiles": [chart, spacer]}}) == {
        "mosaicLayout": {
            "columns": 12,
            "tiles": [
                {"width": 6, "widget": {"xyChart": {}}},
                {"xPos": 6, "width": 6, "widget": {"blank": {}}},
            ],
        }
    }


def test_the_dashboard_charts_the_handlers_outcomes() -> None:
    body = json.loads(DASHBOARD_FILE.read_text())
    filters = [
        data_set["timeSeriesQuery"]["timeSeriesFilter"]["filter"]
        for tile in body["mosaicLayout"]["tiles"]
        for data_set in tile["widget"]["xyChart"]["dataSets"]
    ]
    charted = {
        value
        for text in filters
        for clause in re.findall(r"metric\.label\.outcome=(?:one_of\(([^)]*)\)|(\"[a-z_]+\"))", text)
        for value in re.findall(r"[a-z_]+", "".join(clause))
    }
    assert charted <= {o.value for o in Outcome}
    alerted = {a.label_filter["outcome"] for a in ALERTS if a.metric is log_filters.DELIVERIES}
    assert {"executed", "duplicate_completed", "lease_taken_over", *alerted} <= charted
    # The failures chart holds every outcome an alert watches: the chart is where the on-call looks next.
    (failures,) = [text for text in filters if "lease_lost" in text]
    assert all(f'"{outcome}"' in failures for outcome in alerted)


def test_names_are_unique_per_stack() -> None:
    def physical(resources) -> set[str]:
        return {
            inputs.get("name")
            or inputs.get("displayName")
            or json.loads(inputs["dashboardJson"])["displayName"]
            for _, _, inputs in resources
        }

    # The pause exists only in the stack's state: it names nothing in the project.
    dev, staging = (
        [r for r in declared(prefix) if r[0] != harness.SLEEP] for prefix in ("eos-dev", "eos-staging")
    )
    assert len(physical(dev)) == len(dev)
    assert not physical(dev) & physical(staging)
    assert not {name for _, name, _ in dev} & {name for _, name, _ in staging}


def test_preview_declares_the_same_resources() -> None:
    assert sorted(name for _, name, _ in declared(preview=True)) == sorted(name for _, name, _ in declared())


def test_the_audit_environment_carries_when_each_job_was_created() -> None:
    settings = with_audit_job(load_stack_settings("dev"))
    pulumi.runtime.set_mocks(harness.GcpMocks("acme"), project=project_name(), stack="dev", preview=False)

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        created = {settings.jobs[0].name: pulumi.Output.from_input("2026-11-29T10:20:00Z")}
        return pulumi.Output.from_input(audit_function_environment(settings, created)["AUDIT_JOBS"]).apply(
            check
        )

    def check(text: str) -> None:
        config = AuditConfig.from_json(text)
        assert [job.not_before for job in config.jobs] == [
            datetime(2026, 11, 29, 10, 20, tzinfo=UTC),
            *([None] * (len(settings.jobs) - 1)),
        ]

    program()
    assert audit_function_environment(settings) == audit_environment(settings)


def test_the_monitoring_resources_pass_every_policy() -> None:
    resources = declared()
    assert {typ for typ, _, _ in resources} == {METRIC, ALERT, DASHBOARD, harness.SLEEP}
    assert violations([(typ, name, inputs, inputs) for typ, name, inputs in resources]) == []


@pytest.fixture(scope="module")
def dev_stack_with_audit() -> list[harness.MockedResource]:
    # The component adds the audit job itself.
    return harness.dev_stack_resources()


def test_the_audit_job_is_scheduled_hourly_through_the_handler(dev_stack_with_audit) -> None:
    jobs = {
        r.inputs["name"]: r.inputs for r in dev_stack_with_audit if r.type == "gcp:cloudscheduler/job:Job"
    }
    audit = jobs[load_stack_settings("dev").scheduler_job_id(AUDIT_JOB_NAME)]
    assert audit["schedule"] == "5 * * * *"
    (function,) = [
        r.inputs
        for r in dev_stack_with_audit
        if r.type == "gcp:cloudfunctionsv2/function:Function" and r.inputs["name"].endswith("handler")
    ]
    handlers = json.loads(function["serviceConfig"]["environmentVariables"]["JOB_HANDLERS"])
    assert handlers[load_stack_settings("dev").scheduler_job_id(AUDIT_JOB_NAME)] == AUDIT_HANDLER


def test_the_stack_with_the_audit_job_passes_every_policy(dev_stack_with_audit) -> None:
    resources = [(r.type, r.name, r.inputs, r.outputs) for r in dev_stack_with_audit]
    assert violations(resources) == []


def test_the_operations_page_shows_each_alerts_runbook_verbatim() -> None:
    page = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for alert in ALERTS:
        assert f"| {alert.meaning} | {alert.runbook} |" in page, alert.key
