"""The demo as a picture: one row per run, every delivery on its run's own clock.

A table of status codes says what happened but not when: the picture shows a crashed attempt's
lease blocking the retries that follow it, and the retry that takes the run over once it ends.
Each delivery is a bar from when it was sent to when its answer (or its absence) was known, in
simulated seconds since the run's first attempt; its colour is the answer, a thick outline
marks the attempt that held the run's lease, and a delivery turned away by a live lease names
the delivery whose lease it was. Drawn with matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from localrun.delivery import Delivery
from localrun.report import delivery_token, in_order_sent
from localrun.verdicts import Verdict

# No display: the picture is a file (pyplot picks no backend before its first figure).
matplotlib.use("Agg")

# Answer classes, in the legend's order: (label, colour).
_RAN = ("ran the job (2xx)", "#2e7d32")
_DUPLICATE = ("duplicate answered from the record (2xx)", "#a5d6a7")
_TERMINAL = ("failed terminally (200, recorded)", "#8e24aa")
_BUSY = ("turned away: lease held (409)", "#fb8c00")
_FAILED = ("failed, claim released (5xx)", "#e53935")
_SILENT = ("no answer: timeout, crash, ended", "#9e9e9e")
_LEGEND = (_RAN, _DUPLICATE, _TERMINAL, _BUSY, _FAILED, _SILENT)
# The shortest bar drawn, in simulated seconds, so an instant answer stays visible.
_MIN_WIDTH_FRACTION = 0.004


def _answer_class(delivery: Delivery) -> tuple[str, str]:
    outcome = delivery.outcome.removeprefix("lost_ack:")
    if delivery.status is None:
        return _SILENT
    if outcome == "failed_terminal":
        return _TERMINAL
    if outcome == "duplicate_completed":
        return _DUPLICATE
    if 200 <= delivery.status < 300:
        return _RAN
    if delivery.status == 409:
        return _BUSY
    return _FAILED


def _lease_holders(deliveries: Sequence[Delivery]) -> dict[int, int]:
    """For each delivery turned away by a live lease, the number of the delivery whose lease
    it was. An attempt that never answered (crashed, ended) carried no attempt id back, but
    when it is the only unanswered delivery sent before, the lease can only be its own."""
    numbers = {d.attempt_id: n for n, d in enumerate(deliveries, start=1) if d.attempt_id}
    holders: dict[int, int] = {}
    for number, delivery in enumerate(deliveries, start=1):
        if not delivery.lease_holder:
            continue
        unanswered = [
            n
            for n, d in enumerate(deliveries[: number - 1], start=1)
            if d.status is None and d.sent_at_s <= delivery.sent_at_s
        ]
        holder = numbers.get(delivery.lease_holder) or (unanswered[0] if len(unanswered) == 1 else None)
        if holder is not None:
            holders[number] = holder
    return holders


def write_timeline(report: dict[str, Any], path: Path) -> Path:
    """Draw the report's runs into `path` (PNG); the path."""
    runs: Sequence[dict[str, Any]] = report["results"]
    sent = [
        in_order_sent([Delivery(**d) for d in run["deliveries"]]) for run in runs
    ]  # per run, in the order sent
    span = max(
        [max(d.answered_at_s or d.sent_at_s, d.sent_at_s) for deliveries in sent for d in deliveries] + [1.0]
    )
    figure, axes = plt.subplots(figsize=(12, 2.0 + 0.5 * max(len(runs), 1)))
    for row, deliveries in enumerate(sent):
        holders = _lease_holders(deliveries)
        held = {n for n, d in enumerate(deliveries, start=1) if d.fence is not None} | set(holders.values())
        for number, delivery in enumerate(deliveries, start=1):
            _, colour = _answer_class(delivery)
            end = delivery.answered_at_s if delivery.answered_at_s is not None else delivery.sent_at_s
            width = max(end - delivery.sent_at_s, span * _MIN_WIDTH_FRACTION)
            y = row + (0.2 if delivery.copy else -0.1)
            axes.barh(
                y,
                width,
                left=delivery.sent_at_s,
                height=0.24,
                color=colour,
                edgecolor="black" if number in held else colour,
                linewidth=1.6 if number in held else 0.5,
                hatch="//" if delivery.outcome.startswith("lost_ack") else None,
            )
            faults = ",".join(f for f in delivery.faults if f != "duplicate")
            lease = f"lease of #{holders[number]}" if number in holders else ""
            note = " ".join(part for part in (f"#{number} {delivery_token(delivery)}", faults, lease) if part)
            # Labels alternate above and below their bars, so close deliveries stay legible.
            above = number % 2 == 1
            axes.annotate(
                note,
                (delivery.sent_at_s, y),
                xytext=(0, 6 if above else -6),
                textcoords="offset points",
                fontsize=5.5,
                va="bottom" if above else "top",
            )
    names = [f"{r['index'] + 1}  {r['schedule_time'][11:16]}  {Verdict(r['verdict']).shown}" for r in runs]
    axes.set_yticks(range(len(runs)), names, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlim(0, span * 1.25)
    axes.set_xlabel("simulated seconds since the run's first attempt")
    axes.grid(axis="x", linewidth=0.3)
    handles = [Patch(color=colour, label=label) for label, colour in _LEGEND]
    handles.append(Patch(facecolor="white", edgecolor="black", linewidth=1.6, label="held the run's lease"))
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="answer lost (lost_ack)"))
    # Below the axes, where it hides no delivery.
    axes.legend(handles=handles, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=4)
    counts = report["verdicts"]
    axes.set_title(
        f"{report['job']}: {report['runs']} runs at speed-up x{report['speedup']:g}, seed {report['seed']}; "
        + ", ".join(f"{Verdict(name).shown} {count}" for name, count in counts.items() if count),
        fontsize=9,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
