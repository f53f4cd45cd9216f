"""The stack's monitoring under Pulumi mocks: metrics, alert policies, the dashboard and the
audit job exist, are named per stack, agree with the function's log lines, and pass the pack."""

from __future__ import annotations

import io
import json
import math
from datetime import UTC, datetime
from typing import Any, cast

import pulumi
import pytest

import tools.mocked_program as harness
from exactly_once import log_fields
from exactly_once.audit.config import AuditConfig
from exactly_once.config import JobTable
from exactly_once.delivery.handler import ScheduledRunHandler
from exactly_once.delivery.outcomes import Answer, Outcome
from exactly_once.delivery.report import DeliveryReport
from exactly_once.run_key import RunKey
from infra.config.schema import project_name
from infra.monitoring import log_filters
from infra.monitoring.alerts import ALERTS, OUTCOME_ALERTS, AlertSpec, alert_filter
from infra.monitoring.dashboard import (
    CHARTED,
    DASHBOARD_FILE,
    dashboard_json,
    outcome_clause,
    without_defaults,
)
from infra.monitoring.operations import declare_operations
from infra.plan.audit_job import AUDIT_HANDLER, audit_config, with_audit_job
from infra.resources.function import job_table_text
from infra.settings.environment import job_table
from infra.settings.jobs import AUDIT_JOB_NAME
from policy.scheduler_guardrails.offline import violations
from tests.support.stack_tables import shipped_table
from tests.support.stacks import dev_stack_resources, fixture_stack

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
        "eos-dev-downstream-failures",
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
    assert 'jsonPayload.event="downstream_failed"' in metrics["eos-dev-downstream-failures"]["filter"]
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


def test_an_outcome_alert_watches_its_outcome_on_the_deliveries_metric() -> None:
    outcome_alerts = [alert for alert in ALERTS if alert.outcome is not None]
    assert [alert.outcome for alert in outcome_alerts] == list(OUTCOME_ALERTS)
    for alert in outcome_alerts:
        assert alert.outcome is not None and alert.metric is log_filters.DELIVERIES
        assert alert.key == alert.name == alert.outcome.value
        assert alert.label_filter == {log_fields.OUTCOME: alert.outcome.value}
        assert set(alert.label_filter) <= set(alert.metric.labels)
    metric_alerts = [alert for alert in ALERTS if alert.outcome is None]
    assert all(alert.label_filter == {} and alert.key == alert.metric.suffix for alert in metric_alerts)
    assert len({alert.key for alert in ALERTS}) == len(ALERTS)


def _delivery_line(outcome: Outcome) -> dict[str, Any]:
    """The line the handler writes for a delivery that came to `outcome`, by its own writer
    (nothing else of the handler runs, so it needs no ledger)."""
    stream = io.StringIO()
    handler = ScheduledRunHandler(
        cast(Any, None),
        cast(Any, None),
        new_attempt_id=lambda: "attempt",
        time_limit_seconds=55,
        end_attempt=cast(Any, None),
        log_stream=stream,
    )
    key = RunKey("my-gcp-project", "us-central1", "eos-dev_nightly", datetime(2026, 10, 16, tzinfo=UTC))
    handler._reply(Answer(outcome, "what happened"), DeliveryReport(key=key, latency_ms=3.5))
    (line,) = stream.getvalue().splitlines()
    return cast(dict[str, Any], json.loads(line))


def _counted_by(alert: AlertSpec, entry: dict[str, Any], service: str) -> bool:
    """Whether `alert`'s series counts `entry`: the metric's filter, then the policy's labels."""
    labels = alert.metric.labels_of(entry)
    return alert.metric.matches(entry, service) and all(
        labels[name] == value for name, value in alert.label_filter.items()
    )


def test_each_outcome_alert_counts_the_functions_line_for_its_outcome_and_no_other() -> None:
    service = "eos-dev-handler"
    entries = {outcome: log_filters.log_entry(_delivery_line(outcome), service) for outcome in Outcome}
    for alert in ALERTS:
        if alert.outcome is None:
            continue
        counted = {outcome for outcome, entry in entries.items() if _counted_by(alert, entry, service)}
        assert counted == {alert.outcome}, alert.key
        assert alert.metric.labels_of(entries[alert.outcome])[log_fields.JOB] == "eos-dev_nightly"
        assert not _counted_by(alert, entries[alert.outcome], "other-service")


def test_alert_policies_are_the_alerts_with_their_filters_thresholds_and_runbooks() -> None:
    policies = of_type(declared(), ALERT)
    assert len(policies) == len(ALERTS)
    # Policies register once their metric's name resolves, in no fixed order.
    by_key = {
        alert.key: next(p for p in policies if p["displayName"] == f"eos-dev: {alert.title}")
        for alert in ALERTS
    }
    for alert in ALERTS:
        policy = by_key[alert.key]
        condition = policy["conditions"][0]["conditionThreshold"]
        assert condition["filter"] == alert_filter(log_filters.metric_id("eos-dev", alert.metric), alert)
        assert condition["thresholdValue"] == alert.alert.threshold
        assert condition["aggregations"][0]["alignmentPeriod"] == f"{alert.alert.window_seconds}s"
        assert policy["severity"] == alert.alert.severity
        assert policy["documentation"]["content"] == (
            f"**What it means.** {alert.alert.meaning}\n\n**Runbook.** {alert.alert.runbook}"
        )
    lease = by_key["lease_lost"]["conditions"][0]["conditionThreshold"]
    assert lease["filter"] == (
        'metric.type="logging.googleapis.com/user/eos-dev-deliveries" AND '
        'resource.type="cloud_run_revision" AND metric.label.outcome="lease_lost"'
    )
    missed = by_key["missed-runs"]["conditions"][0]["conditionThreshold"]
    assert missed["filter"] == (
        'metric.type="logging.googleapis.com/user/eos-dev-missed-runs" AND resource.type="cloud_run_revision"'
    )
    assert by_key["lease_lost"]["displayName"] == (
        "eos-dev: lease_lost: a run was taken over while its job was still running"
    )
    for policy in policies:
        assert policy["notificationChannels"] == list(CHANNELS)
        assert policy["conditions"][0]["conditionThreshold"]["aggregations"][0]["groupByFields"] == [
            "metric.label.job"
        ]


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
        "skipped late",
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


def _chart_filters(prefix: str) -> list[str]:
    body = json.loads(dashboard_json(prefix))
    return [
        data_set["timeSeriesQuery"]["timeSeriesFilter"]["filter"]
        for tile in body["mosaicLayout"]["tiles"]
        for data_set in tile["widget"]["xyChart"]["dataSets"]
    ]


def _counted_by_chart(text: str, entry: dict[str, Any]) -> bool:
    """Whether a deliveries chart with filter `text` counts `entry`, read from the filter."""
    outcome = entry["jsonPayload"][log_fields.OUTCOME]
    return f'metric.label.outcome="{outcome}"' in text or (
        "one_of(" in text and f'"{outcome}"' in text.split("one_of(", 1)[1].split(")", 1)[0]
    )


def test_every_outcome_is_on_a_chart_and_every_alerted_one_on_the_failures_chart() -> None:
    """The failures chart is where the on-call looks after an alert, so it holds every outcome
    an alert watches; and no outcome the handler can come to is left off the dashboard."""
    filters = [text for text in _chart_filters("eos-dev") if "user/eos-dev-deliveries" in text]
    entries = {
        outcome: log_filters.log_entry(_delivery_line(outcome), "eos-dev-handler") for outcome in Outcome
    }
    assert all(any(_counted_by_chart(text, entry) for text in filters) for entry in entries.values())
    (failures,) = [text for text in filters if outcome_clause(CHARTED["failures"]) in text]
    for alert in ALERTS:
        if alert.outcome is not None:
            assert _counted_by_chart(failures, entries[alert.outcome]), alert.key


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


def test_the_shipped_audit_config_carries_when_each_job_was_created() -> None:
    settings = with_audit_job(fixture_stack("dev"))
    pulumi.runtime.set_mocks(harness.GcpMocks("acme"), project=project_name(), stack="dev", preview=False)

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        created = {settings.jobs[0].name: pulumi.Output.from_input("2026-11-29T10:20:00Z")}
        return pulumi.Output.all(job_table_text(settings, created), job_table_text(settings)).apply(check)

    def check(texts: list[str]) -> None:
        with_created, without = (JobTable.from_json(text, "shipped", math.inf) for text in texts)
        assert with_created.audit is not None
        config = AuditConfig.from_raw(with_created.audit)
        assert [job.not_before for job in config.jobs] == [
            datetime(2026, 11, 29, 10, 20, tzinfo=UTC),
            *([None] * (len(settings.jobs) - 1)),
        ]
        # Without creation times, the table is the one the settings alone describe.
        assert without == job_table(settings, audit_config(settings))

    program()


def test_the_monitoring_resources_pass_every_policy() -> None:
    resources = declared()
    assert {typ for typ, _, _ in resources} == {METRIC, ALERT, DASHBOARD, harness.SLEEP}
    assert violations([(typ, name, inputs, inputs) for typ, name, inputs in resources]) == []


@pytest.fixture(scope="module")
def dev_stack_with_audit() -> list[harness.MockedResource]:
    # The component adds the audit job itself.
    return dev_stack_resources()


def test_the_audit_job_is_scheduled_hourly_through_the_handler(dev_stack_with_audit) -> None:
    jobs = {
        r.inputs["name"]: r.inputs for r in dev_stack_with_audit if r.type == "gcp:cloudscheduler/job:Job"
    }
    audit = jobs[fixture_stack("dev").scheduler_job_id(AUDIT_JOB_NAME)]
    assert audit["schedule"] == "5 * * * *"
    table = shipped_table(dev_stack_with_audit)
    assert table.jobs[fixture_stack("dev").scheduler_job_id(AUDIT_JOB_NAME)].handler == AUDIT_HANDLER


def test_the_stack_with_the_audit_job_passes_every_policy(dev_stack_with_audit) -> None:
    resources = [(r.type, r.name, r.inputs, r.outputs) for r in dev_stack_with_audit]
    assert violations(resources) == []
