"""What a soak reports: the JSON report, a short Markdown table and a chart of outcomes by
fault kind, and the lines naming every failed run with its seed and fault schedule."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from localrun.soak.checker import Judged, Outcome
from localrun.soak.plan import RunPlan, SoakFault, planned_counts
from localrun.soak.scheduler import SCHEDULED

NO_FAULT = "none"


def build_report(
    *,
    seed: int,
    runs: int,
    only: int | None,
    command: str,
    plans: Sequence[RunPlan],
    judged: Sequence[Judged],
    injected: dict[int, list[str]],
    stray: Sequence[str],
    facts: dict[str, Any],
) -> dict[str, Any]:
    selected = [plans[only]] if only is not None else list(plans)
    outcomes = Counter(j.outcome.value for j in judged)
    injected_counts = Counter(kind for index in injected for kind in injected[index])
    by_fault: dict[str, Counter[str]] = {kind.value: Counter() for kind in SoakFault}
    by_fault[NO_FAULT] = Counter()
    for entry in judged:
        plan = plans[entry.run]
        kinds = [k.value for k in plan.kinds] if entry.role == SCHEDULED else [SoakFault.FORCED.value]
        for kind in kinds or [NO_FAULT]:
            by_fault[kind][entry.outcome.value] += 1
    failed = [j for j in judged if j.outcome.fails]
    return {
        "ok": not failed and not stray,
        "command": command,
        "seed": seed,
        "runs": len(selected),
        "runs_planned": runs,
        "only": only,
        "deliveries_runs": len(judged),  # scheduled runs plus each forced run's two
        "deliveries": sum(j.deliveries for j in judged),
        "faults_planned": planned_counts(selected),
        "faults_injected": {kind.value: injected_counts.get(kind.value, 0) for kind in SoakFault},
        "outcomes": {outcome.value: outcomes.get(outcome.value, 0) for outcome in Outcome},
        "outcomes_by_fault": {kind: dict(counts) for kind, counts in by_fault.items()},
        "stray_executions": list(stray),
        "failed": [{**entry.to_json(), "schedule": plans[entry.run].describe()} for entry in failed],
        **facts,
    }


def failure_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for entry in report["failed"]:
        lines.append(
            f"FAILED run {entry['run']} ({entry['tag']}, {entry['role']}, {entry['job_id']} "
            f"{entry['schedule_time']}): {entry['outcome']}, {entry['executions']} execution(s); "
            + (f"{entry['harness_error']}; " if entry.get("harness_error") else "")
            + f"seed {report['seed']}, fault schedule {entry['schedule']}; replay: "
            f'make soak ARGS="--seed {report["seed"]} --runs {report["runs_planned"]} --only {entry["run"]}"'
        )
    for tag in report["stray_executions"]:
        lines.append(f"FAILED: an execution of {tag!r}, which the soak never delivered")
    return lines


def markdown(report: dict[str, Any]) -> str:
    outcomes = report["outcomes"]
    rows = [
        "| | |",
        "| --- | --- |",
        f"| runs | {report['runs']} (seed {report['seed']}) |",
        f"| deliveries | {report['deliveries']} |",
        f"| executed once | {outcomes['once']} |",
        f"| executed twice | {outcomes['twice'] + outcomes['twice_overlapping']} "
        f"({outcomes['twice_overlapping']} overlapping) |",
        f"| never executed (lost) | {outcomes['lost']} |",
        f"| given up by the scheduler | {outcomes['given_up']} |",
        f"| wall time | {report['duration_seconds']:.0f} s |",
        "",
        "| fault | injected | once | twice | lost | given up |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind, counts in report["outcomes_by_fault"].items():
        injected = report["faults_injected"].get(kind, "-")
        twice = counts.get("twice", 0) + counts.get("twice_overlapping", 0)
        rows.append(
            f"| {kind} | {injected} | {counts.get('once', 0)} | {twice} | {counts.get('lost', 0)} "
            f"| {counts.get('given_up', 0)} |"
        )
    return "\n".join(rows) + "\n"


def write_chart(report: dict[str, Any], path: Path) -> Path:
    """Outcomes by fault kind: one bar per kind, split by outcome as shares of that kind's runs
    (the plain runs outnumber each fault's by far), with the number of runs beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_fault = report["outcomes_by_fault"]
    kinds = [kind for kind in by_fault if sum(by_fault[kind].values())]
    colours = {
        "once": "#4caf50",
        "twice": "#e53935",
        "twice_overlapping": "#8e0000",
        "lost": "#ff9800",
        "given_up": "#9e9e9e",
        "not_delivered": "#3f51b5",
    }
    totals = [sum(by_fault[kind].values()) for kind in kinds]
    figure, axes = plt.subplots(figsize=(9, 0.38 * len(kinds) + 1.6))
    left = [0.0] * len(kinds)
    for outcome, colour in colours.items():
        shares = [
            100 * by_fault[kind].get(outcome, 0) / total for kind, total in zip(kinds, totals, strict=True)
        ]
        if any(shares):
            axes.barh(kinds, shares, left=left, color=colour, label=outcome.replace("_", " "))
        left = [a + b for a, b in zip(left, shares, strict=True)]
    for row, total in enumerate(totals):
        axes.text(101, row, f"{total} runs", va="center", fontsize="small")
    axes.set_xlim(0, 118)
    axes.invert_yaxis()
    axes.set_xlabel("% of the runs with that fault")
    axes.set_title(f"soak: {report['runs']} runs, seed {report['seed']}: outcome by fault kind")
    axes.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
