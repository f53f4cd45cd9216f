"""CPU per delivery and per audited run, release by release: a small history and its chart.

On the default instance (a sixth of a vCPU) the CPU a delivery costs is what its wall time
and an instance's capacity come from, so a release that makes it heavier should show. One
bench run's numbers are in latest.json; this keeps one entry per release (the version of
exactly_once), which a full `make bench` writes for the current version, replacing that
version's earlier entry, and draws as an SVG (the same way as bench/chart.py: matplotlib, text
as text, bytes that depend only on the numbers).

The numbers are the serving process's CPU, medians, unconfined (a quota changes the wall time,
not the CPU): cases 1-2 over HTTP at the run's lowest round trip (the server's process alone;
in process where HTTP was not run), the storm's per delivery (in process), and the audit's per
audited run (case 7). The documented flow has no audit: its audited run is None.

    python -m bench.cpu_history bench/results/cpu-history.json bench/results/cpu-history.svg
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt

import exactly_once
from bench.chart import BASELINE, OURS
from bench.cpu import CPU_METRIC
from bench.over_http import HTTP_MARK

HISTORY_FILE = "cpu-history.json"
HISTORY_CHART = "cpu-history.svg"
# Kind of delivery -> (how the chart and the report name it, the case its row's name starts
# with over HTTP, in process).
DELIVERIES = {
    "first": ("first delivery", f"1. {HTTP_MARK}first delivery", "1. first delivery"),
    "elsewhere": (
        "duplicate, another instance",
        f"2. {HTTP_MARK}duplicate of a completed run, another",
        "2. duplicate of a completed run, another",
    ),
    "same": (
        "duplicate, same instance",
        f"2. {HTTP_MARK}duplicate of a completed run, same",
        "2. duplicate of a completed run, same",
    ),
    "storm": ("storm, per delivery (in process)", "3. duplicate storm", "3. duplicate storm"),
}
MARKERS = {"first": "o", "elsewhere": "s", "same": "^", "storm": "D"}
# Ours a little left of each release, the baseline a little right: equal values stay apart.
SIDE_BY_SIDE = 0.06


def entry(report: Mapping[str, Any]) -> dict[str, Any]:
    """This release's entry, from a report's JSON (Report.as_json())."""
    cpu_ms: dict[str, dict[str, float]] = {}
    for kind, (_, http_case, in_process_case) in DELIVERIES.items():
        row = _lowest_rtt_row(report["metrics"], http_case) or _lowest_rtt_row(
            report["metrics"], in_process_case
        )
        if row is not None:
            cpu_ms[kind] = {who: round(row[who]["median"], 3) for who in ("ours", "baseline")}
    audit = report.get("scale", {}).get("audit")
    return {
        "version": exactly_once.__version__,
        "date": report["machine"]["date"],
        # Where the numbers come from: the run's command and the machine's load around it.
        "command": report["command"],
        "load": [report["machine"]["load_before"], report["machine"]["load_after"]],
        "cpu_ms_per_delivery": cpu_ms,
        "cpu_us_per_audited_run": {
            "ours": round(audit["cpu_us_per_run"], 1) if audit and "cpu_us_per_run" in audit else None,
            "baseline": None,
        },
    }


def _lowest_rtt_row(metrics: Sequence[Mapping[str, Any]], case: str) -> Mapping[str, Any] | None:
    rows = [
        m
        for m in metrics
        if m["case"].startswith(case) and m["metric"] == CPU_METRIC and m["rtt_ms"] is not None
    ]
    return min(rows, key=lambda m: m["rtt_ms"]) if rows else None


def record(report: Mapping[str, Any], path: Path) -> list[dict[str, Any]]:
    """Put this release's entry into the history at `path` (replacing the same version's),
    releases in the order they were first recorded; returns the history."""
    history: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
    new = entry(report)
    at = next((index for index, old in enumerate(history) if old["version"] == new["version"]), None)
    if at is None:
        history.append(new)
    else:
        history[at] = new
    path.write_text(json.dumps(history, indent=2) + "\n")
    return history


def draw(history: Sequence[Mapping[str, Any]], path: Path) -> None:
    """The history's chart: CPU per delivery by kind, and per audited run, release by release."""
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "bench-cpu", "font.size": 9})
    figure, (deliveries, audit) = plt.subplots(
        1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [1.4, 1]}, layout="constrained"
    )
    releases = [str(item["version"]) for item in history]
    positions = list(range(len(history)))
    for kind, (label, _, _) in DELIVERIES.items():
        for who, colour, name, offset in (
            ("ours", OURS, "ours", -SIDE_BY_SIDE),
            ("baseline", BASELINE, "documented flow", SIDE_BY_SIDE),
        ):
            points = [
                (position + offset, item["cpu_ms_per_delivery"][kind][who])
                for position, item in zip(positions, history, strict=True)
                if kind in item["cpu_ms_per_delivery"]
            ]
            if points:
                deliveries.plot(
                    [p for p, _ in points],
                    [v for _, v in points],
                    color=colour,
                    marker=MARKERS[kind],
                    linestyle="-" if who == "ours" else ":",
                    label=f"{label}: {name}",
                )
    deliveries.set_ylabel("CPU of the serving process per delivery (ms, median)")
    deliveries.set_title("CPU per delivery (over HTTP at the lowest RTT run)", fontsize=9)
    deliveries.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    audited = [
        (position, item["cpu_us_per_audited_run"]["ours"])
        for position, item in zip(positions, history, strict=True)
        if item["cpu_us_per_audited_run"]["ours"] is not None
    ]
    if audited:
        audit.plot([p for p, _ in audited], [v for _, v in audited], color=OURS, marker="o", label="ours")
    audit.set_ylabel("CPU per audited run (µs)")
    audit.set_title("The hourly audit (case 7; the documented flow has none)", fontsize=9)
    for axes in (deliveries, audit):
        axes.set_xticks(positions, releases)
        axes.set_xlabel("release")
        axes.set_xlim(-0.5, max(len(history) - 0.5, 0.5))
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    figure.suptitle("CPU per delivery and per audited run, release by release", fontsize=10)
    figure.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(figure)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.cpu_history HISTORY.json CHART.svg")
    draw(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
