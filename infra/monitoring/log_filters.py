"""The log-based metrics' filters, as data: rendered for Cloud Logging, evaluable in Python.

Each metric is described once here. `filter()` and `label_extractors()` render what Cloud
Logging runs; `matches()` and `labels()` apply the same description to a log entry in Python,
so the tests can push the function's real log lines through the metrics' logic. Field names
come from function/exactly_once/log_fields.py, which the log writers use too.

Pulumi-free, so the tests and the `ops` CLI can read it without the Pulumi engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exactly_once import log_fields

# Cloud Run functions (2nd gen) write their stdout to this monitored resource.
RESOURCE_TYPE = "cloud_run_revision"


@dataclass(frozen=True)
class LogMetric:
    """One log-based metric over the function's structured lines (`jsonPayload`)."""

    suffix: str  # the metric id is "<stack prefix>-<suffix>"
    description: str
    present: tuple[str, ...] = ()  # fields that must exist
    equals: Mapping[str, str] = field(default_factory=dict)  # fields that must have a value
    labels: tuple[str, ...] = ()  # fields extracted as metric labels
    value_field: str | None = None  # set for a distribution (e.g. latency)

    def filter(self, service_name: str) -> str:
        """The Cloud Logging filter: this service's lines carrying the metric's fields."""
        clauses = [f'resource.type="{RESOURCE_TYPE}"', f'resource.labels.service_name="{service_name}"']
        clauses += [f"jsonPayload.{name}:*" for name in self.present]
        clauses += [f'jsonPayload.{name}="{value}"' for name, value in self.equals.items()]
        return " AND ".join(clauses)

    def label_extractors(self) -> dict[str, str]:
        return {name: f"EXTRACT(jsonPayload.{name})" for name in self.labels}

    def value_extractor(self) -> str | None:
        return f"EXTRACT(jsonPayload.{self.value_field})" if self.value_field else None

    def matches(self, entry: Mapping[str, Any], service_name: str) -> bool:
        """What `filter(service_name)` selects, applied to one LogEntry-shaped mapping."""
        resource = entry.get("resource", {})
        payload = entry.get("jsonPayload", {})
        return (
            resource.get("type") == RESOURCE_TYPE
            and resource.get("labels", {}).get("service_name") == service_name
            and all(name in payload for name in self.present)
            and all(name in payload and str(payload[name]) == value for name, value in self.equals.items())
        )

    def labels_of(self, entry: Mapping[str, Any]) -> dict[str, str]:
        """What `label_extractors()` pulls out of a matching entry ("" when a field is absent)."""
        payload = entry.get("jsonPayload", {})
        return {name: str(payload.get(name, "")) for name in self.labels}


DELIVERIES = LogMetric(
    suffix="deliveries",
    description="Deliveries of scheduled runs to the exactly-once function, by outcome and job.",
    present=(log_fields.OUTCOME,),
    labels=(log_fields.OUTCOME, log_fields.JOB),
)
LATENCY = LogMetric(
    suffix="delivery-latency",
    description="Time the function spent on one delivery (claim, job, finish), by outcome and job.",
    present=(log_fields.OUTCOME, log_fields.LATENCY_MS),
    labels=(log_fields.OUTCOME, log_fields.JOB),
    value_field=log_fields.LATENCY_MS,
)
MISSED_RUNS = LogMetric(
    suffix="missed-runs",
    description="Scheduled runs the missed-run audit found without a completed record, by job.",
    equals={log_fields.EVENT: log_fields.MISSED_RUN},
    labels=(log_fields.JOB,),
)
ENDED_ATTEMPTS = LogMetric(
    suffix="ended-attempts",
    description="Attempts the function ended before their lease could be taken over, by cause and job.",
    equals={log_fields.EVENT: log_fields.ATTEMPT_ENDED},
    labels=(log_fields.CAUSE, log_fields.JOB),
)
DOWNSTREAM_FAILURES = LogMetric(
    suffix="downstream-failures",
    description="Proxy runs whose downstream work (Cloud Run job execution, workflow, BigQuery job) "
    "failed or was cancelled after it started, by job.",
    equals={log_fields.EVENT: log_fields.DOWNSTREAM_FAILED},
    labels=(log_fields.JOB,),
)
FAILURE_PAUSES = LogMetric(
    suffix="failure-pauses",
    description="Jobs paused after pauseAfterFailures failed runs in a row (one point per pause), by job.",
    equals={log_fields.EVENT: log_fields.JOB_PAUSED_AFTER_FAILURES},
    labels=(log_fields.JOB,),
)
METRICS = (DELIVERIES, LATENCY, MISSED_RUNS, ENDED_ATTEMPTS, DOWNSTREAM_FAILURES)
# Declared only by a stack some job of which sets pauseAfterFailures: no other stack can log
# what they count, and a stack without them keeps exactly the resources it deployed before.
PAUSE_METRICS = (FAILURE_PAUSES,)


def declared_metrics(*, failure_pauses: bool) -> tuple[LogMetric, ...]:
    """The metrics a stack declares: `failure_pauses` when some job sets pauseAfterFailures."""
    return METRICS + PAUSE_METRICS if failure_pauses else METRICS


def metric_id(name_prefix: str, metric: LogMetric) -> str:
    """The metric's id in the project: several stacks share one without clashing."""
    return f"{name_prefix}-{metric.suffix}"


def log_entry(line: Mapping[str, Any], service_name: str) -> dict[str, Any]:
    """The LogEntry Cloud Run makes of one JSON line its container wrote to stdout."""
    return {
        "resource": {"type": RESOURCE_TYPE, "labels": {"service_name": service_name}},
        "severity": line.get(log_fields.SEVERITY, "DEFAULT"),
        "jsonPayload": dict(line),
    }
