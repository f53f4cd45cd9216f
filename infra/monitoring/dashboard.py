"""The stack's dashboard: infra/monitoring/dashboard.json with this stack's metrics and the
outcomes each chart counts (in its filter and its title) filled in.

The JSON holds the layout; which outcomes a chart counts is decided here, from the handler's
`Outcome` members, so the failures chart follows the alerts (infra/monitoring/alerts.py): an
outcome that gets an alert is on the chart the on-call looks at next without touching the
JSON. Pulumi-free, so the tests render it without the Pulumi engine.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any

from exactly_once import log_fields
from exactly_once.delivery.outcomes import Outcome
from infra.monitoring import log_filters
from infra.monitoring.alerts import METRIC_TYPE_PREFIX, OUTCOME_ALERTS

DASHBOARD_FILE = Path(__file__).resolve().with_name("dashboard.json")

# Requests refused before anything was written: no run is at stake, so no alert, but a burst
# of them belongs beside the failures.
REFUSED = (Outcome.BAD_REQUEST, Outcome.METHOD_NOT_ALLOWED, Outcome.BODY_TOO_LARGE, Outcome.UNKNOWN_JOB)
# What each chart counts, by its placeholder in dashboard.json.
CHARTED: dict[str, tuple[Outcome, ...]] = {
    "executions": (Outcome.EXECUTED, Outcome.LEASE_TAKEN_OVER),
    "suppressed": (
        Outcome.DUPLICATE_COMPLETED,
        Outcome.IN_PROGRESS,
        Outcome.OVERLAP_SKIPPED,
        Outcome.OVERLAP_WAIT,
    ),
    "takeovers": (Outcome.LEASE_TAKEN_OVER,),
    # Runs recorded skipped and never run: past a job's startingDeadlineSeconds, or while failed
    # runs paused the job (pauseAfterFailures). Not failures (nothing is retried or lost by
    # them), but a job whose runs keep arriving late, or stay paused, has a problem to fix.
    "skipped_late": (Outcome.SKIPPED_LATE, Outcome.SKIPPED_PAUSED),
    "failures": (*OUTCOME_ALERTS, *REFUSED),
}


def outcome_clause(outcomes: Sequence[Outcome]) -> str:
    """The Monitoring filter clause selecting the deliveries metric's series of `outcomes`."""
    label = f"metric.label.{log_fields.OUTCOME}"
    if len(outcomes) == 1:
        return f'{label}="{outcomes[0].value}"'
    quoted = ",".join(f'"{outcome.value}"' for outcome in outcomes)
    return f"{label}=one_of({quoted})"


def dashboard_json(name_prefix: str) -> str:
    """infra/monitoring/dashboard.json with this stack's metric ids, outcomes and title filled
    in, written as the Monitoring API stores it.

    The API drops every scalar or list field that holds its type's default (a tile's
    `xPos: 0`, `yPos: 0`, an empty list) and answers without it. The provider compares the
    JSON it sent with the JSON it reads back, so a field the API dropped reads as a change on
    every preview. Leaving such fields out here, whoever edits the file, makes a `pulumi
    preview` right after `pulumi up` show no change for the dashboard."""
    template = Template(DASHBOARD_FILE.read_text(encoding="utf-8"))
    metrics = {
        "deliveries": log_filters.DELIVERIES,
        "latency": log_filters.LATENCY,
        "missed": log_filters.MISSED_RUNS,
    }
    values = {
        "title": f"Exactly-once scheduler ({name_prefix})",
        **{key: METRIC_TYPE_PREFIX + log_filters.metric_id(name_prefix, m) for key, m in metrics.items()},
        "resource_type": log_filters.RESOURCE_TYPE,
        # Inside a JSON string: the clauses' quotes are escaped.
        **{key: json.dumps(outcome_clause(outcomes))[1:-1] for key, outcomes in CHARTED.items()},
        # A chart's title names what it counts.
        **{f"{key}_listed": ", ".join(outcomes) for key, outcomes in CHARTED.items()},
    }
    return json.dumps(without_defaults(json.loads(template.substitute(values))), sort_keys=True)


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
