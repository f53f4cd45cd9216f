"""The picture of a bench run: latency against the round trip to Firestore, in process and over
HTTP, and the storm's errors.

Drawn from the report's JSON (so `python -m bench.chart bench/results/latest.json` redraws it
without measuring again) with matplotlib, as an SVG whose text stays text and whose bytes
depend only on the numbers (no date, fixed ids), so a commit of it diffs like the numbers do.
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
from matplotlib.axes import Axes

OURS, BASELINE = "#1b6ac9", "#d9480f"
# Colour tells whose; line and marker tell which case.
LINES = (
    ("1. first delivery", "first delivery", "o", "-"),
    ("2. duplicate of a completed run, another instance", "duplicate at another instance", "s", ":"),
)
# The same cases over HTTP (bench/over_http.py names them).
HTTP_LINES = (
    ("1. over HTTP: first delivery", "first delivery", "o", "-"),
    (
        "2. over HTTP: duplicate of a completed run, another instance",
        "duplicate at another instance",
        "s",
        ":",
    ),
)
STORM = "3. duplicate storm"


def draw(report: Mapping[str, Any], path: Path) -> None:
    """Write the chart of `report` (Report.as_json()) to `path` (.svg or .png)."""
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "bench", "font.size": 9})
    figure, (latency, over_http, errors) = plt.subplots(
        1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1.4, 1.4, 1]}, layout="constrained"
    )
    _latency(latency, report["metrics"], LINES, "in process")
    _latency(over_http, report["metrics"], HTTP_LINES, "over HTTP (Functions Framework)")
    over_http.sharey(latency)
    _storm_errors(errors, report["metrics"])
    figure.suptitle(
        f"Ours against the documented flow, Firestore emulator behind a modelled round trip "
        f"({report['machine']['date']})",
        fontsize=10,
    )
    figure.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(figure)


def _rows(metrics: Sequence[Mapping[str, Any]], case: str, name: str) -> list[Mapping[str, Any]]:
    found = [
        m for m in metrics if m["case"].startswith(case) and m["metric"] == name and m["rtt_ms"] is not None
    ]
    return sorted(found, key=lambda m: m["rtt_ms"])


def _latency(
    axes: Axes, metrics: Sequence[Mapping[str, Any]], lines: Sequence[tuple[str, str, str, str]], how: str
) -> None:
    for case, label, marker, style in lines:
        rows = _rows(metrics, case, "latency")
        if not rows:
            continue
        rtts = [m["rtt_ms"] for m in rows]
        for who, colour in (("ours", OURS), ("baseline", BASELINE)):
            medians = [m[who]["median"] for m in rows]
            tails = [m[who]["p95"] - m[who]["median"] for m in rows]
            axes.errorbar(
                rtts,
                medians,
                yerr=[[0.0] * len(rows), tails],
                color=colour,
                linestyle=style,
                marker=marker,
                markersize=4,
                capsize=3,
                linewidth=1.4,
                label=f"{label}: {'ours' if who == 'ours' else 'documented flow'}",
            )
        for m in rows:
            if m["ratio"]:
                axes.annotate(
                    f"{m['ratio']:.2f}x",
                    (m["rtt_ms"], m["baseline"]["median"]),
                    textcoords="offset points",
                    xytext=(4, -10 if marker == "s" else 4),
                    fontsize=7,
                    color="#444444",
                )
    axes.set_xlabel("round-trip time to Firestore (ms)")
    axes.set_ylabel("latency per delivery (ms): median, bar up to p95")
    axes.set_title(f"Latency {how} (annotated: times faster ours is, median)", fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left")


def _storm_errors(axes: Axes, metrics: Sequence[Mapping[str, Any]]) -> None:
    rows = _rows(metrics, STORM, "deliveries that error (5xx)")
    positions = list(range(len(rows)))
    width = 0.38
    for offset, who, colour, label in (
        (-0.5, "ours", OURS, "ours"),
        (0.5, "baseline", BASELINE, "documented flow"),
    ):
        medians = [m[who]["median"] for m in rows]
        for position, median in zip(positions, medians, strict=True):
            axes.annotate(
                f"{median:.0f}",
                (position + offset * width, median),
                textcoords="offset points",
                xytext=(0, 2),
                ha="center",
                fontsize=7,
                color=colour,
            )
        spread = [
            [m[who]["median"] - m[who]["min"] for m in rows],
            [m[who]["max"] - m[who]["median"] for m in rows],
        ]
        axes.bar(
            [p + offset * width for p in positions],
            medians,
            width,
            yerr=spread,
            capsize=3,
            color=colour,
            label=label,
            error_kw={"linewidth": 0.8},
        )
    axes.set_xticks(positions, [f"{m['rtt_ms']:g}" for m in rows])
    axes.set_ylim(0, 110)
    axes.set_xlabel("round-trip time to Firestore (ms)")
    axes.set_ylabel("deliveries answered 5xx (%): median, bar min..max")
    axes.set_title("Storm of 64 concurrent deliveries of one run", fontsize=9)
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize=7)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.chart REPORT.json CHART.svg")
    draw(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
