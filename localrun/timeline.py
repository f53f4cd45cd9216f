"""The demo as a picture: one row per run, every delivery on its run's own clock.

A table of status codes says what happened but not when: the picture shows a crashed attempt's
lease blocking the retries that follow it, and the retry that takes the run over once it ends.
Each delivery is a bar from when it was sent to when its answer (or its absence) was known, in
simulated seconds since the run's first attempt; its colour is the answer, a thick outline
marks the attempt that held the run's lease, and a delivery turned away by a live lease names
the delivery whose lease it was.

Retries of a run come seconds apart on a clock of minutes, so their labels would print over
each other wherever they were put by a rule of thumb. The layout is therefore measured: every
label's width as drawn, each placed under its bar in the first lane of its run where it
touches no other, each run as tall as its lanes, and the picture as tall as its runs, its axis
and its legend, counted in pixels at the resolution it is saved at. Drawn with matplotlib's Agg
canvas: no display needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.patches import Patch
from matplotlib.text import Text

from localrun.delivery import Delivery
from localrun.report import delivery_token, in_order_sent
from localrun.verdicts import Verdict


class AnswerClass(NamedTuple):
    """What an answer says about the run, as the legend names it, and its colour."""

    label: str
    colour: str


RAN = AnswerClass("ran the job (2xx)", "#2e7d32")
DUPLICATE = AnswerClass("duplicate answered from the record (2xx)", "#a5d6a7")
TERMINAL = AnswerClass("failed terminally (200, recorded)", "#8e24aa")
BUSY = AnswerClass("turned away: lease held (409)", "#fb8c00")
# A request refused before anything was claimed (400 bad request, 405, 413 body too large):
# there is no claim to release, and nothing in the ledger changed.
REFUSED = AnswerClass("refused before any claim (4xx)", "#1e88e5")
FAILED = AnswerClass("failed, claim released (5xx)", "#e53935")
SILENT = AnswerClass("no answer: timeout, crash, ended", "#9e9e9e")
LEGEND = (RAN, DUPLICATE, TERMINAL, BUSY, REFUSED, FAILED, SILENT)

# The picture is laid out in pixels at this resolution, and saved at it.
DPI = 100
WIDTH_PX = 1400
# Font sizes in points: a label at 8.5 pt is 12 px tall at DPI.
LABEL_PT = 8.5
TICK_PT = 9.0
TITLE_PT = 11.0
LEGEND_PT = 9.0
# A run's row: its attempts' bars, then its copies' below them, then its lanes of labels.
BAR_PX = 9.0
BAR_GAP_PX = 3.0
ROW_PAD_PX = 5.0
# Between two labels in one lane, and between two lanes.
LABEL_GAP_PX = 8.0
LANE_GAP_PX = 3.0
# Around the axes: right of the last tick, between the axis and the legend, and the edges.
RIGHT_MARGIN_PX = 30.0
LEGEND_GAP_PX = 14.0
EDGE_PX = 10.0
# The shortest bar drawn, as a share of the time axis, so an instant answer stays visible.
_MIN_WIDTH_FRACTION = 0.004


def answer_class(delivery: Delivery) -> AnswerClass:
    outcome = delivery.outcome.removeprefix("lost_ack:")
    if delivery.status is None:
        return SILENT
    if outcome == "failed_terminal":
        return TERMINAL
    if outcome == "duplicate_completed":
        return DUPLICATE
    if 200 <= delivery.status < 300:
        return RAN
    if delivery.status == 409:
        return BUSY
    if 400 <= delivery.status < 500:
        return REFUSED
    return FAILED


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


@dataclass
class _Label:
    """One delivery's label: its text as drawn, and where its run's lanes put it."""

    text: Text
    at_s: float  # where its bar starts
    width_px: float
    lane: int = 0


def write_timeline(report: dict[str, Any], path: Path) -> Path:
    """Draw the report's runs into `path` (PNG); the path."""
    figure = draw_timeline(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)
    return path


def draw_timeline(report: dict[str, Any]) -> Figure:
    """The report's runs as a figure, laid out for saving at DPI."""
    runs: Sequence[dict[str, Any]] = report["results"]
    sent = [in_order_sent([Delivery(**d) for d in run["deliveries"]]) for run in runs]
    span = max([max(d.answered_at_s or d.sent_at_s, d.sent_at_s) for ds in sent for d in ds] + [1.0])
    figure = Figure(figsize=(WIDTH_PX / DPI, 10.0), dpi=DPI)
    FigureCanvasAgg(figure)  # extents are measured as the PNG draws them
    axes = figure.add_axes((0.0, 0.0, 1.0, 1.0))

    # Measured first: each label's width, the run names' widths, the legend's size.
    labels = [
        [
            _label(axes, delivery, number, _lease_holders(deliveries))
            for number, delivery in enumerate(deliveries, start=1)
        ]
        for deliveries in sent
    ]
    names = [f"{r['index'] + 1}  {r['schedule_time'][11:16]}  {Verdict(r['verdict']).shown}" for r in runs]
    axes.tick_params(axis="both", labelsize=TICK_PT)
    left = max([_width(figure, name, TICK_PT) for name in names] + [0.0]) + 3 * EDGE_PX
    axis_px = WIDTH_PX - left - RIGHT_MARGIN_PX
    # The time axis reaches far enough that every label ends inside it.
    every = [label for row in labels for label in row]
    end_s = max(
        [span * 1.03]
        + [label.at_s * axis_px / (axis_px - label.width_px - EDGE_PX) for label in every if label.at_s > 0]
    )
    lane_px = max([label.text.get_window_extent().height for label in every] + [1.0]) + LANE_GAP_PX
    for row in labels:
        _assign_lanes(row, axis_px / end_s)

    # Rows top down, in pixels (the y axis counts pixels, top at 0): a run's bars, a line of
    # its copies' bars when it has any, its lanes of labels.
    tops, top = [], 0.0
    for deliveries, row in zip(sent, labels, strict=True):
        tops.append(top)
        lanes = max([label.lane for label in row], default=-1) + 1
        top += _bars_px(deliveries) + lanes * lane_px + ROW_PAD_PX
    rows_px = max(top, 1.0)

    for index, (deliveries, row) in enumerate(zip(sent, labels, strict=True)):
        if index % 2:
            axes.axhspan(tops[index], tops[index] + _height(tops, rows_px, index), color="#f5f5f5", zorder=0)
        _draw_run(axes, deliveries, row, tops[index], span, lane_px)
    axes.set_yticks([top + ROW_PAD_PX + BAR_PX / 2 for top in tops], names)
    axes.set_ylim(rows_px, 0.0)
    axes.set_xlim(0.0, end_s)
    axes.set_xlabel("simulated seconds since the run's first attempt", fontsize=TICK_PT + 1)
    axes.grid(axis="x", linewidth=0.3)
    axes.set_axisbelow(True)
    counts = report["verdicts"]
    axes.set_title(
        f"{report['job']}: {report['runs']} runs at speed-up x{report['speedup']:g}, seed {report['seed']}; "
        + ", ".join(f"{Verdict(name).shown} {count}" for name, count in counts.items() if count),
        fontsize=TITLE_PT,
    )
    legend = _legend(figure)

    # The heights around the rows, as drawn: the axis with its ticks and title, the legend.
    axes.set_position((left / WIDTH_PX, 0.5, axis_px / WIDTH_PX, 0.4))
    figure.canvas.draw()
    axis = axes.xaxis.get_tightbbox()
    axis_below = axes.bbox.y0 - axis.y0 if axis is not None else 0.0
    title_above = axes.title.get_window_extent().y1 - axes.bbox.y1
    legend_px = legend.get_window_extent().height
    bottom = EDGE_PX + legend_px + LEGEND_GAP_PX + axis_below
    height = bottom + rows_px + title_above + EDGE_PX
    figure.set_size_inches(WIDTH_PX / DPI, height / DPI)
    axes.set_position((left / WIDTH_PX, bottom / height, axis_px / WIDTH_PX, rows_px / height))
    legend.set_bbox_to_anchor((0.5, EDGE_PX / height), transform=figure.transFigure)
    return figure


def _label(axes: Axes, delivery: Delivery, number: int, holders: dict[int, int]) -> _Label:
    faults = ",".join(f for f in delivery.faults if f != "duplicate")
    lease = f"lease of #{holders[number]}" if number in holders else ""
    note = " ".join(part for part in (f"#{number} {delivery_token(delivery)}", faults, lease) if part)
    text = axes.text(0.0, 0.0, note, fontsize=LABEL_PT, ha="left", va="top")
    return _Label(text, delivery.sent_at_s, text.get_window_extent().width)


def _assign_lanes(row: list[_Label], px_per_s: float) -> None:
    """Each label in the first lane of its run where it overlaps none placed before it, in the
    order their bars start: a lane is a line of text under the run's bars."""
    ends: list[float] = []  # per lane, where its last label ends (pixels)
    for label in sorted(row, key=lambda label: label.at_s):
        start = label.at_s * px_per_s
        lane = next((n for n, end in enumerate(ends) if end + LABEL_GAP_PX <= start), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = start + label.width_px
        label.lane = lane


def _bars_px(deliveries: Sequence[Delivery]) -> float:
    """The height of a run's bars: its attempts' line, and its copies' line under it."""
    lines = 2 if any(delivery.copy for delivery in deliveries) else 1
    return ROW_PAD_PX + lines * BAR_PX + (lines - 1) * BAR_GAP_PX + ROW_PAD_PX


def _height(tops: Sequence[float], rows_px: float, index: int) -> float:
    return (tops[index + 1] if index + 1 < len(tops) else rows_px) - tops[index]


def _draw_run(
    axes: Axes,
    deliveries: Sequence[Delivery],
    row: Sequence[_Label],
    top: float,
    span: float,
    lane_px: float,
) -> None:
    """A run's bars (attempts, then injected copies under them) and its labels in their lanes."""
    holders = _lease_holders(deliveries)
    held = {n for n, d in enumerate(deliveries, start=1) if d.fence is not None} | set(holders.values())
    for number, (delivery, label) in enumerate(zip(deliveries, row, strict=True), start=1):
        colour = answer_class(delivery).colour
        end = delivery.answered_at_s if delivery.answered_at_s is not None else delivery.sent_at_s
        width = max(end - delivery.sent_at_s, span * _MIN_WIDTH_FRACTION)
        y = top + ROW_PAD_PX + BAR_PX / 2 + ((BAR_PX + BAR_GAP_PX) if delivery.copy else 0.0)
        axes.barh(
            y,
            width,
            left=delivery.sent_at_s,
            height=BAR_PX,
            color=colour,
            edgecolor="black" if number in held else colour,
            linewidth=1.6 if number in held else 0.5,
            hatch="//" if delivery.outcome.startswith("lost_ack") else None,
        )
        label.text.set_position((delivery.sent_at_s, top + _bars_px(deliveries) + label.lane * lane_px))


def _legend_handles() -> list[Patch]:
    handles = [Patch(color=kind.colour, label=kind.label) for kind in LEGEND]
    handles.append(Patch(facecolor="white", edgecolor="black", linewidth=1.6, label="held the run's lease"))
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="answer lost (lost_ack)"))
    return handles


def _legend(figure: Figure) -> Legend:
    """The legend below everything, in as many columns as fit the picture's width: the fewest
    lines it can take."""
    handles = _legend_handles()
    for columns in range(len(handles), 1, -1):
        legend = figure.legend(handles=handles, fontsize=LEGEND_PT, loc="lower center", ncols=columns)
        if legend.get_window_extent().width <= WIDTH_PX - 2 * EDGE_PX:
            return legend
        legend.remove()
    return figure.legend(handles=handles, fontsize=LEGEND_PT, loc="lower center", ncols=1)


def _width(figure: Figure, text: str, size: float) -> float:
    probe = figure.text(0.0, 0.0, text, fontsize=size)
    width = float(probe.get_window_extent().width)
    probe.remove()
    return width
