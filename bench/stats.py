"""Summaries over repeats: the report always shows the spread, never one lucky run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

Better = Literal["lower", "higher"]


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile: an observed value, so a p95 of 20 samples is a real delivery."""
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Summary:
    n: int
    min: float
    median: float
    p95: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            raise ValueError("no samples to summarise")
        return cls(len(values), min(values), statistics.median(values), percentile(values, 0.95), max(values))


@dataclass(frozen=True)
class Metric:
    """One row of the report: ours and the baseline, measured the same way in the same run."""

    case: str
    name: str
    unit: str
    better: Better
    ours: Summary
    baseline: Summary
    # The modelled round-trip time to Firestore (bench/network.py); None for cases measured
    # on the direct loopback connection only.
    rtt_ms: float | None = None

    @property
    def ratio(self) -> float | None:
        """How many times better ours is, on the medians (>1: ours wins); None when undefined."""
        return self._ratio(self.ours.median, self.baseline.median)

    @property
    def p95_ratio(self) -> float | None:
        """The same on the p95s: whether the tail agrees with the middle."""
        return self._ratio(self.ours.p95, self.baseline.p95)

    def _ratio(self, ours: float, base: float) -> float | None:
        if self.better == "lower":
            return base / ours if ours > 0 else None
        return ours / base if base > 0 else None

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "rtt_ms": self.rtt_ms,
            "metric": self.name,
            "unit": self.unit,
            "better": self.better,
            "ours": asdict(self.ours),
            "baseline": asdict(self.baseline),
            "ratio": self.ratio,
            "p95_ratio": self.p95_ratio,
        }


def ratio_text(ratio: float | None) -> str:
    """A ratio column's cell: how many times better ours is, or why there is no ratio."""
    return "n/a (ours is 0)" if ratio is None else f"{ratio:.2f}x"


def metric(
    case: str,
    name: str,
    unit: str,
    better: Better,
    ours: Sequence[float],
    baseline: Sequence[float],
    rtt_ms: float | None = None,
) -> Metric:
    return Metric(case, name, unit, better, Summary.of(ours), Summary.of(baseline), rtt_ms)
