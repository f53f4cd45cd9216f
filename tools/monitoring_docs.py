"""The monitoring facts the docs show, from the definitions: the metrics and alerts tables, and
the counts and lists the prose around them gives (how many metrics, alert policies, pauses).

A count typed into a page is the first thing to go stale when an alert is added; these are
rendered by `make docs` (tools/docs_tables.py), so the page follows the entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from infra.monitoring.alerts import ALERTS, PAUSE_ALERTS, fires_when
from infra.monitoring.log_filters import METRICS, LogMetric
from infra.resources.propagation import PAUSES

Table = Callable[[Sequence[str], Iterable[Sequence[str]]], str]


def _selects(metric: LogMetric) -> str:
    """The lines a metric reads, as its filter says (beyond this service's resource)."""
    clauses = [f"`jsonPayload.{name}:*`" for name in metric.present]
    clauses += [f'`jsonPayload.{name}="{value}"`' for name, value in metric.equals.items()]
    return " and ".join(clauses)


def metrics_table(table: Table) -> str:
    rows = [
        (
            f"`{metric.suffix}`",
            metric.description,
            _selects(metric),
            f"`{metric.value_field}`, as a distribution" if metric.value_field else "a count",
            ", ".join(f"`{label}`" for label in metric.labels),
        )
        for metric in METRICS
    ]
    return table(("Metric (`<prefix>-…`)", "Counts", "Lines", "Value", "Labels"), rows)


def alerts_table(table: Table) -> str:
    rows = [
        (
            f"`{alert.name}`" if alert.outcome is not None else alert.name,
            fires_when(alert.alert),
            alert.alert.meaning,
            alert.alert.runbook,
        )
        for alert in (*ALERTS, *PAUSE_ALERTS)
    ]
    return table(("Alert", "Fires when", "What it means", "Runbook"), rows)


# Inline values: one line of prose each, shown wherever a page needs it.
FIGURES: dict[str, Callable[[], str]] = {
    "metric-count": lambda: str(len(METRICS)),
    "alert-count": lambda: str(len(ALERTS)),
    "alerted-outcomes": lambda: ", ".join(f"`{a.name}`" for a in ALERTS if a.outcome is not None),
    "alerted-metrics": lambda: ", ".join(f"`{a.key}`" for a in ALERTS if a.outcome is None),
    "pause-count": lambda: str(sum(not pause.only_with_secrets for pause in PAUSES)),
    "pause-count-with-secrets": lambda: str(len(PAUSES)),
}
