"""The timeline picture, measured as drawn: every label legible and on its own, none cut off, the
legend clear of the axis it explains, and each answer in the class that says what it was."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from localrun import timeline
from localrun.delivery import Delivery
from localrun.verdicts import Verdict

# The report of a `make demo` run with the defaults (20 runs, seed 7), as written to .demo/.
DEMO_REPORT = Path(__file__).with_name("fixtures") / "demo_report.json"
# Smaller than this many pixels, a label is not read but guessed.
LEGIBLE_PX = 10.0


@dataclass(frozen=True)
class Drawn:
    figure: Figure
    dpi: float  # the resolution the picture was saved at

    def labels(self) -> list[Text]:
        """The delivery labels: every text the runs' axes hold."""
        (axes,) = self.figure.axes
        return list(axes.texts)

    def box(self, artist: Artist) -> Bbox:
        return artist.get_window_extent()


@pytest.fixture
def draw(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Draw a report with write_timeline and keep the figure it saved, drawn again at the
    resolution of the saved picture so that every extent is measured as the PNG shows it."""
    saved: list[tuple[Figure, float]] = []
    original = Figure.savefig

    def keep(figure: Figure, *args: Any, **kwargs: Any) -> None:
        original(figure, *args, **kwargs)
        saved.append((figure, float(kwargs.get("dpi") or figure.dpi)))

    monkeypatch.setattr(Figure, "savefig", keep)

    def drawn(report: dict[str, Any]) -> Drawn:
        path = timeline.write_timeline(report, tmp_path / "timeline.png")
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        figure, dpi = saved[-1]
        figure.set_dpi(dpi)
        FigureCanvasAgg(figure).draw()  # closed by pyplot, it has lost its canvas
        return Drawn(figure, dpi)

    yield drawn


def _delivery(
    sent: float,
    answered: float | None,
    status: int | None,
    outcome: str,
    *,
    copy: bool = False,
    **fields: Any,
) -> dict[str, Any]:
    return asdict(Delivery(1, copy, sent, status, outcome, answered_at_s=answered, **fields))


def _report(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    results = [
        {
            "index": index,
            "schedule_time": f"2026-12-01T{index % 24:02d}:00:00Z",
            "verdict": Verdict.SUCCEEDED.value,
            "deliveries": deliveries,
        }
        for index, deliveries in enumerate(runs)
    ]
    verdicts = {verdict.value: 0 for verdict in Verdict} | {Verdict.SUCCEEDED.value: len(runs)}
    return {
        "job": "dense",
        "runs": len(runs),
        "speedup": 20.0,
        "seed": 1,
        "results": results,
        "verdicts": verdicts,
    }


def _dense() -> dict[str, Any]:
    """Deliveries as close as the scheduler sends them, with the longest labels there are."""
    crowded = [
        _delivery(0.0, 0.4, 409, "lost_ack:in_progress", faults=["lost_ack", "duplicate"], lease_holder="b"),
        _delivery(0.0, 1.2, 200, "executed", copy=True, attempt_id="b", fence=1, faults=["duplicate"]),
        *(
            _delivery(0.3 * n, 0.3 * n + 0.1, 409, "in_progress", lease_holder="b", region="a")
            for n in range(1, 8)
        ),
        _delivery(2.6, 2.7, 200, "duplicate_completed", region="b"),
    ]
    ended = [
        _delivery(0.0, 80.0, None, "ended", faults=["slow"]),
        *(_delivery(80.0 + n, 80.5 + n, 409, "in_progress", lease_holder="x") for n in range(5)),
        _delivery(88.0, 89.0, 200, "lease_taken_over", attempt_id="y", fence=2),
    ]
    refused = [_delivery(0.0, 0.1, 413, "body_too_large"), _delivery(0.2, 0.3, 400, "bad_request")]
    # Last of all, where a label has the least room before the picture's edge.
    late = [
        _delivery(0.0, 0.2, 500, "failed_released", faults=["fail"]),
        _delivery(95.0, 95.5, 200, "executed"),
    ]
    return _report([crowded, ended, refused, late, crowded])


def _demo_report() -> dict[str, Any]:
    report: dict[str, Any] = json.loads(DEMO_REPORT.read_text(encoding="utf-8"))
    return report


def _overlapping(drawn: Drawn) -> list[tuple[str, str]]:
    boxes = [(text.get_text(), drawn.box(text)) for text in drawn.labels()]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


@pytest.mark.parametrize("report", [_demo_report(), _dense()], ids=["demo", "dense"])
def test_no_two_labels_overlap(draw: Any, report: dict[str, Any]) -> None:
    drawn = draw(report)
    assert len(drawn.labels()) == sum(len(run["deliveries"]) for run in report["results"])
    assert _overlapping(drawn) == []


@pytest.mark.parametrize("report", [_demo_report(), _dense()], ids=["demo", "dense"])
def test_every_label_is_whole_and_legible(draw: Any, report: dict[str, Any]) -> None:
    drawn = draw(report)
    picture = drawn.figure.bbox
    cut = [text.get_text() for text in drawn.labels() if not picture.contains(*drawn.box(text).p1)]
    assert cut == []
    assert min(text.get_fontsize() * drawn.dpi / 72 for text in drawn.labels()) >= LEGIBLE_PX


@pytest.mark.parametrize("runs", [1, 2, 20])
def test_the_legend_leaves_the_axis_and_its_title_clear(draw: Any, runs: int) -> None:
    report = _report([[_delivery(0.0, 1.0, 200, "executed", attempt_id="a", fence=1)]] * runs)
    drawn = draw(report)
    (axes,) = drawn.figure.axes
    legend = axes.get_legend() or drawn.figure.legends[0]
    legend_box = drawn.box(legend)
    for name, box in (
        ("x-axis title", drawn.box(axes.xaxis.label)),
        ("x-axis and its tick labels", axes.xaxis.get_tightbbox()),
        ("axes", axes.bbox),
    ):
        assert box is not None and not legend_box.overlaps(box), name
    assert drawn.figure.bbox.contains(*legend_box.p0) and drawn.figure.bbox.contains(*legend_box.p1)


def test_a_4xx_refusal_is_not_drawn_as_a_released_claim() -> None:
    """400 and 413 are answered before anything is claimed: no claim was released."""
    refused = [
        Delivery(1, False, 0.0, status, outcome) for status, outcome in ((413, "body_too_large"), (400, "x"))
    ]
    failed = Delivery(1, False, 0.0, 500, "failed_released")
    busy = Delivery(1, False, 0.0, 409, "in_progress")
    assert {timeline.answer_class(d) for d in refused} == {timeline.REFUSED}
    assert timeline.answer_class(failed) == timeline.FAILED and timeline.answer_class(busy) == timeline.BUSY
    assert timeline.REFUSED.colour not in {
        kind.colour for kind in timeline.LEGEND if kind != timeline.REFUSED
    }
    assert timeline.REFUSED in timeline.LEGEND
