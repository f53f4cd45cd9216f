"""What lets an operator see that every scheduled run ran exactly once, and act when not.

Log-based metrics over the function's structured lines (infra/monitoring/log_filters.py), alert policies
on the outcomes that need a human (each with its runbook line), and a dashboard whose JSON is
kept in the repository (infra/monitoring/dashboard.json). The missed-run audit that feeds the missed-run
alert is an ordinary job of the stack: see infra/plan/audit_job.py.

Every name is derived from the caller's prefix, so several stacks share a project without
clashing. Without notification channels the policies still exist and open incidents in the
console; docs/operations.md says how to add a channel.

Cloud Monitoring knows a new log-based metric's type only minutes after Cloud Logging created
it, so the alert policies wait for a pause after the metrics (infra/resources/propagation.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumiverse_time as time

from infra.monitoring import log_filters
from infra.monitoring.log_filters import LogMetric
from infra.resources.propagation import METRIC_TYPES_DELAY_SECONDS, pause_after

DASHBOARD_FILE = Path(__file__).resolve().with_name("dashboard.json")
_METRIC_TYPE = "logging.googleapis.com/user/"
# Latency buckets: 1 ms growing by 2x to about 9 minutes, past any function timeout.
_LATENCY_BUCKETS: gcp.logging.MetricBucketOptionsArgsDict = {
    "exponential_buckets": {"num_finite_buckets": 20, "growth_factor": 2.0, "scale": 1.0}
}


@dataclass(frozen=True)
class AlertSpec:
    """One alert policy: which metric series, how many in what window, and the runbook."""

    key: str
    title: str
    metric: LogMetric
    label_filter: Mapping[str, str]
    threshold: float  # alert when the count in `window_seconds` exceeds this
    window_seconds: int
    severity: str
    meaning: str
    runbook: str


ALERTS: tuple[AlertSpec, ...] = (
    AlertSpec(
        key=log_filters.LEASE_LOST,
        title="lease_lost: a run was taken over while its job was still running",
        metric=log_filters.DELIVERIES,
        label_filter={"outcome": log_filters.LEASE_LOST},
        threshold=0,
        window_seconds=300,
        severity="ERROR",
        meaning="An attempt's lease ended while its job ran, another attempt took the run over, and the "
        "job may have run twice: the instance stalled (frozen, or cut off from Firestore) for longer than "
        "a lease without its watchdog ending it.",
        runbook="Look for the instance's attempt_ended lines and Firestore errors around the run id; check "
        "the job's downstream effects for the run id and fence in the log line; a longer leaseSeconds "
        "tolerates longer stalls.",
    ),
    AlertSpec(
        key=log_filters.STORE_ERROR,
        title="store_error: the function could not read or write the run ledger",
        metric=log_filters.DELIVERIES,
        label_filter={"outcome": log_filters.STORE_ERROR},
        threshold=0,
        window_seconds=300,
        severity="ERROR",
        meaning="Firestore failed or timed out; deliveries are answered 500 and Cloud Scheduler retries "
        "them. A claim that failed ran nothing, and its retries run the job once Firestore answers; a "
        "completing write that failed after the job ran leaves the run leased, and the first retry after "
        "the lease ends runs the job again. A running job's lease renewals (one write every third of a "
        "lease: every 10 s by default) fail too, and its instance is ended after five sixths of a lease "
        "without one (attempt ended, renewal_failed). Runs are missed once the retries run out.",
        runbook="Check the Firestore status page and the database's quotas; check that the runtime "
        "service account still holds roles/datastore.user on the ledger database. Once it recovers, "
        "run `python -m ops audit` and backfill what it reports missed.",
    ),
    AlertSpec(
        key=log_filters.INTERNAL_ERROR,
        title="internal_error: the function failed unexpectedly",
        metric=log_filters.DELIVERIES,
        label_filter={"outcome": log_filters.INTERNAL_ERROR},
        threshold=0,
        window_seconds=300,
        severity="ERROR",
        meaning="An unexpected error in the function itself (a bug, not the job and not Firestore): the deli"
        "very was answered 500 with a JSON body and Cloud Scheduler retries it. An error between the claim "
        "and the completing write leaves the run's lease in place, so the first retry after the lease "
        "ends takes the run over and runs the job, also when it had already returned "
        "(`job_returned: true`): then the job runs twice.",
        runbook="Read the log line's `error` and `traceback` and fix the code. With `job_returned: true`, "
        "check the job's downstream effects for the run id: unless its completing write went through, the "
        "retry that took the run over ran the job again. Once the retries are over, `python -m ops audit` "
        "lists the runs they did not complete.",
    ),
    AlertSpec(
        key=log_filters.FAILED_TERMINAL,
        title="failed_terminal: a job failed in a way retrying cannot fix",
        metric=log_filters.DELIVERIES,
        label_filter={"outcome": log_filters.FAILED_TERMINAL},
        threshold=0,
        window_seconds=300,
        severity="WARNING",
        meaning="The job raised a terminal error (bad body, a 4xx from downstream). The run is recorded "
        "as completed with the error and will not be retried.",
        runbook="Read the log line's `error`; fix the job's body or the downstream call. To run it again "
        "after the fix: `python -m ops redo --stack <stack> --job <job> --at <schedule time>` (deletes the "
        "run's record, then delivers the run). Not for a BigQuery job BigQuery ran and failed "
        "(invalidQuery): its job id comes from the run id, so the redo finds the same failed job; fix the "
        "query in the stack config for the next runs and run this run's query by hand. Nor for a "
        "cloudRunJob run whose execution started: the redo finds it by RUN_ID and starts nothing.",
    ),
    AlertSpec(
        key=log_filters.FAILED_RELEASED,
        title="failed_released: a job keeps failing and being retried",
        metric=log_filters.DELIVERIES,
        label_filter={"outcome": log_filters.FAILED_RELEASED},
        threshold=2,
        window_seconds=900,
        severity="WARNING",
        meaning="A job raised a retryable error three or more times in 15 minutes. Each failure released "
        "the run for Cloud Scheduler's next retry; when the retries run out the run is missed.",
        runbook="Read the log lines' `error` and `traceback` for the job; fix the cause (often a "
        "downstream outage). If retries ran out, `python -m ops audit` lists the run and "
        "`python -m ops backfill` re-delivers it.",
    ),
    AlertSpec(
        key=log_filters.WRONG_TARGET,
        title="wrong_target: a run is recorded by another function",
        metric=log_filters.DELIVERIES,
        label_filter={"outcome": log_filters.WRONG_TARGET},
        threshold=0,
        window_seconds=300,
        severity="ERROR",
        meaning="The run's record was written by another function (the line's `recorded_target`; this "
        "one's is `target`): two deployments share a runs collection and a job name. The delivery was "
        "refused (409) and the job did not run here; every retry is refused the same way, and once they "
        "run out the missed-run audit reports the run missed, recorded by the other target.",
        runbook="Find the deployment `recorded_target` names, give one of the two functions a "
        "runsCollection of its own, and `pulumi up`. If this stack moved, `python -m ops audit` lists the "
        "refused runs as missed and `python -m ops backfill` runs them; if the other one moved, its records "
        "stay in this collection, and `python -m ops redo` (deletes the record, then delivers) runs each "
        "refused run this stack's job must still run.",
    ),
    AlertSpec(
        key=log_filters.MISSED_RUNS.suffix,
        title="missed run: a scheduled run never completed",
        metric=log_filters.MISSED_RUNS,
        label_filter={},
        threshold=0,
        window_seconds=3600,
        severity="CRITICAL",
        meaning="The hourly missed-run audit found a run whose retry window has closed without a "
        "completed record, or one recorded by another target (the line's `recorded_target`): this "
        "stack's job never ran it (or never finished). Cloud Scheduler will not try again.",
        runbook="Run `python -m ops audit --stack <stack> --job <job>` to list the runs, find why in the "
        "function's logs for that schedule time (auth, ingress, store_error, failures; a run recorded by "
        "another target: see wrong_target), fix it, then "
        "`python -m ops backfill --stack <stack> --job <job> --at <schedule time>` each missed run.",
    ),
    AlertSpec(
        key=log_filters.ENDED_ATTEMPTS.suffix,
        title="attempt ended: a job overran its time limit or lost touch with the ledger",
        metric=log_filters.ENDED_ATTEMPTS,
        label_filter={},
        threshold=0,
        window_seconds=900,
        severity="ERROR",
        meaning="The function ended an instance so that no retry would run a job alongside it: the job "
        "ran past its time limit (cause time_limit), or the instance could not renew the run's lease "
        "(renewal_failed) or found it taken over (taken_over). Unless taken over already, the run stays "
        "blocked until one lease (leaseSeconds, 30 s by default) after the attempt's last renewal or its "
        "claim; a running job renews every third of a lease, so with the defaults that is 20 to 30 s after "
        "an instance ended at its time limit and about 5 s after one ended for renewal_failed. The next "
        "Cloud Scheduler retry after that takes the run over.",
        runbook="time_limit: make the job stop in time (check run.seconds_left() between steps) or raise "
        "functionTimeoutSeconds and the job's attemptDeadlineSeconds; renewal_failed: look for Firestore "
        "errors and latency around the run id; in every case check the job's downstream effects for the "
        "run id, since its last step may have been cut off.",
    ),
)


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
    opts: pulumi.ResourceOptions | None = None,
) -> Operations:
    """Metrics, alert policies and the dashboard for the function serving `function_service`
    (its Cloud Run service, as a name or projects/.../services/<name>). Resources are named
    `<name_prefix>-...`; the caller makes the prefix unique per stack."""
    service_name = pulumi.Output.from_input(function_service).apply(
        lambda service: service.rsplit("/", 1)[-1]
    )
    metrics = {
        metric.suffix: _log_metric(name_prefix, metric, project, service_name, opts)
        for metric in log_filters.METRICS
    }
    # Triggered by the metrics' names: a new stack, a stack brought up again after `pulumi
    # destroy`, or a renamed (so replaced) metric waits again; an unchanged stack does not.
    ready = pause_after(
        f"{name_prefix}-metric-types-propagation",
        METRIC_TYPES_DELAY_SECONDS,
        after=list(metrics.values()),
        triggers={suffix: metric.name for suffix, metric in metrics.items()},
        opts=opts or pulumi.ResourceOptions(),
    )
    policy_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[ready]))
    policies = {
        alert.key: _alert_policy(
            name_prefix, alert, metrics[alert.metric.suffix], project, notification_channels, policy_opts
        )
        for alert in ALERTS
    }
    dashboard = gcp.monitoring.Dashboard(
        f"{name_prefix}-dashboard",
        project=project,
        dashboard_json=dashboard_json(name_prefix),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(metrics.values()))),
    )
    return Operations(metrics=metrics, metric_types_ready=ready, alert_policies=policies, dashboard=dashboard)


def metric_id(name_prefix: str, metric: LogMetric) -> str:
    return f"{name_prefix}-{metric.suffix}"


def dashboard_json(name_prefix: str) -> str:
    """infra/monitoring/dashboard.json with this stack's metric ids and title filled in, written as the
    Monitoring API stores it.

    The API drops every scalar or list field that holds its type's default (a tile's
    `xPos: 0`, `yPos: 0`, an empty list) and answers without it. The provider compares the
    JSON it sent with the JSON it reads back, so a field the API dropped reads as a change on
    every preview. Leaving such fields out here, whoever edits the file, makes a `pulumi
    preview` right after `pulumi up` show no change for the dashboard."""
    template = Template(DASHBOARD_FILE.read_text(encoding="utf-8"))
    text = template.substitute(
        title=f"Exactly-once scheduler ({name_prefix})",
        deliveries=_METRIC_TYPE + metric_id(name_prefix, log_filters.DELIVERIES),
        latency=_METRIC_TYPE + metric_id(name_prefix, log_filters.LATENCY),
        missed=_METRIC_TYPE + metric_id(name_prefix, log_filters.MISSED_RUNS),
    )
    return json.dumps(without_defaults(json.loads(text)), sort_keys=True)


def without_defaults(value: Any) -> Any:
    """`value` without the object fields proto3 JSON leaves out: 0, false, "" and [].

    An empty object stays: it is a message that is set (`"blank": {}` is a spacer widget)."""
    if isinstance(value, dict):
        kept = {key: without_defaults(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if not _is_default(item)}
    if isinstance(value, list):
        return [without_defaults(item) for item in value]
    return value


def _is_default(value: Any) -> bool:
    # bool is an int: `False == 0`, so one comparison covers both.
    return isinstance(value, int | float | str | list) and value in (0, "", [])


def alert_filter(metric_name: str, alert: AlertSpec) -> str:
    """The Cloud Monitoring filter of `alert`'s time series."""
    clauses = [f'metric.type="{_METRIC_TYPE}{metric_name}"', f'resource.type="{log_filters.RESOURCE_TYPE}"']
    clauses += [f'metric.label.{label}="{value}"' for label, value in alert.label_filter.items()]
    return " AND ".join(clauses)


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
        severity=alert.severity,
        conditions=[
            {
                "display_name": alert.title,
                "condition_threshold": {
                    "filter": series_filter,
                    "comparison": "COMPARISON_GT",
                    "threshold_value": alert.threshold,
                    "duration": "0s",
                    "aggregations": [
                        {
                            "alignment_period": f"{alert.window_seconds}s",
                            "per_series_aligner": "ALIGN_SUM",
                            "cross_series_reducer": "REDUCE_SUM",
                            "group_by_fields": ["metric.label.job"],
                        }
                    ],
                    "trigger": {"count": 1},
                },
            }
        ],
        documentation={
            "subject": f"[{name_prefix}] {alert.title}",
            "mime_type": "text/markdown",
            "content": f"**What it means.** {alert.meaning}\n\n**Runbook.** {alert.runbook}",
        },
        notification_channels=list(notification_channels),
        opts=opts,
    )
