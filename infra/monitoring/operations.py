"""What lets an operator see that every scheduled run ran exactly once, and act when not.

Log-based metrics over the function's structured lines (infra/monitoring/log_filters.py), alert policies
on the outcomes that need a human (infra/monitoring/alerts.py, each with its runbook line), and a
dashboard whose JSON is kept in the repository (infra/monitoring/dashboard.json, filled in by
infra/monitoring/dashboard.py). The missed-run audit that feeds the missed-run
alert is an ordinary job of the stack: see infra/plan/audit_job.py.

Every name is derived from the caller's prefix, so several stacks share a project without
clashing. Without notification channels the policies still exist and open incidents in the
console; docs/operations.md says how to add a channel.

Cloud Monitoring knows a new log-based metric's type only minutes after Cloud Logging created
it, so the alert policies wait for a pause after the metrics (infra/resources/propagation.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumiverse_time as time

from exactly_once import log_fields
from infra.monitoring import log_filters
from infra.monitoring.alerts import INCIDENT_AUTO_CLOSE_SECONDS, AlertSpec, alert_filter, declared_alerts
from infra.monitoring.dashboard import dashboard_json
from infra.monitoring.log_filters import LogMetric, metric_id
from infra.resources.durations import duration
from infra.resources.propagation import METRIC_TYPES, pause_after

# Latency buckets: 1 ms growing by 2x to about 9 minutes, past any function timeout.
_LATENCY_BUCKETS: gcp.logging.MetricBucketOptionsArgsDict = {
    "exponential_buckets": {"num_finite_buckets": 20, "growth_factor": 2.0, "scale": 1.0}
}


@dataclass(frozen=True)
class Operations:
    """The monitoring resources of one stack, by role."""

    metrics: Mapping[str, gcp.logging.Metric]
    # What every alert policy waits for: Cloud Monitoring knowing the metrics' types.
    metric_types_ready: time.Sleep
    alert_policies: Mapping[str, gcp.monitoring.AlertPolicy]
    dashboard: gcp.monitoring.Dashboard


def declare_operations(
    name_prefix: str,
    *,
    project: pulumi.Input[str],
    function_service: pulumi.Input[str],
    notification_channels: Sequence[pulumi.Input[str]] = (),
    failure_pauses: bool = False,
    opts: pulumi.ResourceOptions | None = None,
) -> Operations:
    """Metrics, alert policies and the dashboard for the function serving `function_service`
    (its Cloud Run service, as a name or projects/.../services/<name>). Resources are named
    `<name_prefix>-...`; the caller makes the prefix unique per stack. `failure_pauses`: some
    job sets pauseAfterFailures, and the pauses get their metric and alert."""
    service_name = pulumi.Output.from_input(function_service).apply(
        lambda service: service.rsplit("/", 1)[-1]
    )
    metrics = {
        metric.suffix: _log_metric(name_prefix, metric, project, service_name, opts)
        for metric in log_filters.declared_metrics(failure_pauses=failure_pauses)
    }
    # Triggered by the metrics' names: a new stack, a stack brought up again after `pulumi
    # destroy`, or a renamed (so replaced) metric waits again; an unchanged stack does not.
    ready = pause_after(
        name_prefix,
        METRIC_TYPES,
        after=list(metrics.values()),
        triggers={suffix: metric.name for suffix, metric in metrics.items()},
        opts=opts or pulumi.ResourceOptions(),
    )
    policy_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[ready]))
    policies = {
        alert.key: _alert_policy(
            name_prefix, alert, metrics[alert.metric.suffix], project, notification_channels, policy_opts
        )
        for alert in declared_alerts(failure_pauses=failure_pauses)
    }
    dashboard = gcp.monitoring.Dashboard(
        f"{name_prefix}-dashboard",
        project=project,
        dashboard_json=dashboard_json(name_prefix),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(metrics.values()))),
    )
    return Operations(metrics=metrics, metric_types_ready=ready, alert_policies=policies, dashboard=dashboard)


def _log_metric(
    name_prefix: str,
    metric: LogMetric,
    project: pulumi.Input[str],
    service_name: pulumi.Output[str],
    opts: pulumi.ResourceOptions | None,
) -> gcp.logging.Metric:
    labels: list[gcp.logging.MetricMetricDescriptorLabelArgsDict] = [
        {"key": label, "value_type": "STRING", "description": f"The log line's `{label}` field."}
        for label in metric.labels
    ]
    distribution = metric.value_field is not None
    descriptor: gcp.logging.MetricMetricDescriptorArgsDict = {
        "metric_kind": "DELTA",
        "value_type": "DISTRIBUTION" if distribution else "INT64",
        "unit": "ms" if distribution else "1",
        "labels": labels,
    }
    return gcp.logging.Metric(
        f"{name_prefix}-metric-{metric.suffix}",
        project=project,
        name=metric_id(name_prefix, metric),
        description=metric.description,
        filter=service_name.apply(metric.filter),
        label_extractors=metric.label_extractors(),
        value_extractor=metric.value_extractor(),
        bucket_options=_LATENCY_BUCKETS if distribution else None,
        metric_descriptor=descriptor,
        opts=opts,
    )


def _alert_policy(
    name_prefix: str,
    alert: AlertSpec,
    metric: gcp.logging.Metric,
    project: pulumi.Input[str],
    notification_channels: Sequence[pulumi.Input[str]],
    opts: pulumi.ResourceOptions | None,
) -> gcp.monitoring.AlertPolicy:
    # The filter names the metric through its output, so the policy waits for the metric.
    series_filter = metric.name.apply(lambda name: alert_filter(name, alert))
    return gcp.monitoring.AlertPolicy(
        f"{name_prefix}-alert-{alert.key}",
        project=project,
        display_name=f"{name_prefix}: {alert.title}",
        combiner="OR",
        severity=alert.alert.severity,
        conditions=[
            {
                "display_name": alert.title,
                "condition_threshold": {
                    "filter": series_filter,
                    "comparison": "COMPARISON_GT",
                    "threshold_value": alert.alert.threshold,
                    "duration": "0s",
                    "aggregations": [
                        {
                            "alignment_period": f"{alert.alert.window_seconds}s",
                            "per_series_aligner": "ALIGN_SUM",
                            "cross_series_reducer": "REDUCE_SUM",
                            "group_by_fields": [f"metric.label.{log_fields.JOB}"],
                        }
                    ],
                    "trigger": {"count": 1},
                },
            }
        ],
        documentation={
            "subject": f"[{name_prefix}] {alert.title}",
            "mime_type": "text/markdown",
            "content": f"**What it means.** {alert.alert.meaning}\n\n**Runbook.** {alert.alert.runbook}",
        },
        alert_strategy={"auto_close": duration(INCIDENT_AUTO_CLOSE_SECONDS)},
        notification_channels=list(notification_channels),
        opts=opts,
    )
