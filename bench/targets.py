"""The targets `make bench` judges: each met, NOT met with its reason, or not measured.

Every target is judged on the run that produced the table next to it. One that is missed says
by how much, and what the same report knows about why: the ratio at every RTT, what one
Firestore RPC costs on that route (so how much of each side's time its RPCs account for), and
the command that looks further. One whose case or RTT was not run says so, rather than
vanishing from the list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from bench.inprocess import STORM_SIZE
from bench.over_http import HTTP_MARK
from bench.stats import Metric, ratio_text

if TYPE_CHECKING:
    from bench.report import Report

Status = Literal["met", "NOT met", "not measured"]

# The targets, at a modelled round trip (ms) -> ratio on the medians that ours must reach.
FIRST_DELIVERY_TARGET = (10.0, 2.7)
DUPLICATE_TARGET = (10.0, 1.35)
# The same over HTTP, where Cloud Scheduler meets the function.
HTTP_FIRST_DELIVERY_TARGET = (10.0, 2.7)
HTTP_DUPLICATE_TARGET = (10.0, 1.4)
# From this round trip on, no case of ours may be slower than the baseline.
NOT_SLOWER_FROM_RTT_MS = 2.0
# The rows' case names start with these (bench/inprocess.py and bench/over_http.py name them).
CASE_1, DUPLICATE_ELSEWHERE = "1. first delivery", "2. duplicate of a completed run, another"
HTTP_CASE_1 = f"1. {HTTP_MARK}first delivery"
HTTP_DUPLICATE_ELSEWHERE = f"2. {HTTP_MARK}duplicate of a completed run, another"
# The RPC-count row beside each latency row.
_RPC_ROWS = {
    CASE_1: "Firestore RPCs per run",
    DUPLICATE_ELSEWHERE: "Firestore RPCs per delivery",
    HTTP_CASE_1: "Firestore RPCs per run",
    HTTP_DUPLICATE_ELSEWHERE: "Firestore RPCs per delivery",
}
_LABELS = {
    CASE_1: "case 1, first delivery",
    DUPLICATE_ELSEWHERE: "case 2, duplicate at another instance",
    HTTP_CASE_1: "case 1, first delivery",
    HTTP_DUPLICATE_ELSEWHERE: "case 2, duplicate at another instance",
}
COLD_START = "5. cold start"
COLD_START_METRIC = "spawn to first run's response"
# Where ours spends a first delivery's time, function by function, on that route.
PROFILE_COMMAND = 'make bench ARGS="--profile --rtt {rtt:g}"'


@dataclass(frozen=True)
class Verdict:
    target: str
    status: Status
    measured: str = ""
    # NOT met: what was missed, by how much, and where to look; not measured: what was not run.
    reason: str = ""

    @property
    def met(self) -> bool:
        return self.status == "met"

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "met": self.met,
            "status": self.status,
            "measured": self.measured,
            "reason": self.reason,
        }

    def markdown(self) -> str:
        if self.status == "not measured":
            return f"- {self.target}: not measured ({self.reason})"
        line = f"- {self.target}: **{self.status}** ({self.measured})"
        return f"{line}\n  - why: {self.reason}" if self.status == "NOT met" else line


def judge(report: Report) -> list[Verdict]:
    return [
        _two_rpcs(report),
        _at_least(report, CASE_1, 1, *FIRST_DELIVERY_TARGET),
        _at_least(report, DUPLICATE_ELSEWHERE, 2, *DUPLICATE_TARGET),
        *_duplicate_not_slower(report),
        _no_case_slower(report, NOT_SLOWER_FROM_RTT_MS),
        *_storms(report),
        _two_rpcs(report, http=True),
        _at_least(report, HTTP_CASE_1, 1, *HTTP_FIRST_DELIVERY_TARGET),
        _at_least(report, HTTP_DUPLICATE_ELSEWHERE, 2, *HTTP_DUPLICATE_TARGET),
        _no_case_slower(report, NOT_SLOWER_FROM_RTT_MS, http=True),
        _cold_start(report),
    ]


def _verdict(target: str, met: bool, measured: str, reason: str) -> Verdict:
    return Verdict(target, "met", measured) if met else Verdict(target, "NOT met", measured, reason)


def _not_run(report: Report, case: int, rtt: float | None = None) -> str | None:
    """What of the run a target needs was not run, if anything."""
    if case not in report.cases:
        return f"case {case} not run"
    if rtt is not None and rtt not in report.rtts:
        return f"RTT {rtt:g} ms not run"
    return None


def _two_rpcs(report: Report, *, http: bool = False) -> Verdict:
    prefix = HTTP_CASE_1 if http else CASE_1
    where = "over HTTP, " if http else ""
    counted = ", counted on the wire" if http else ""
    target = f"{where}case 1: exactly 2 Firestore RPCs per first delivery (ours){counted}, at every RTT"
    if (missing := _not_run(report, 1)) is not None:
        return Verdict(target, "not measured", reason=missing)
    rows = report.rows(prefix, _RPC_ROWS[prefix])
    if not rows:
        return Verdict(target, "not measured", reason="no such rows in this run")
    off = [row for row in rows if not row.ours.min == row.ours.max == 2]
    measured = (
        f"{min(r.ours.min for r in rows):g}..{max(r.ours.max for r in rows):g} RPCs "
        f"over {sum(r.ours.n for r in rows)} runs"
    )
    reason = (
        "at "
        + ", ".join(f"RTT {r.rtt_ms:g} ms ours sent {r.ours.min:g}..{r.ours.max:g}" for r in off)
        + ": a first delivery is one create and one complete; localrun/firestore_rpcs.py counts "
        "them per RPC method"
    )
    return _verdict(target, not off, measured, reason)


def _at_least(report: Report, prefix: str, case: int, rtt: float, ratio: float) -> Verdict:
    where = "over HTTP, " if HTTP_MARK in prefix else ""
    target = (
        f"{where}RTT {rtt:g} ms, {_LABELS[prefix]}: at least {ratio:g}x faster than the baseline (median)"
    )
    if (missing := _not_run(report, case, rtt)) is not None:
        return Verdict(target, "not measured", reason=missing)
    if not (rows := [r for r in report.rows(prefix, "latency") if r.rtt_ms == rtt]):
        return Verdict(target, "not measured", reason="no such rows in this run")
    row = rows[0]
    return _verdict(target, (row.ratio or 0.0) >= ratio, _ratios(row), _shortfall(report, prefix, row, ratio))


def _duplicate_not_slower(report: Report) -> Iterator[Verdict]:
    rtts = [rtt for rtt in report.rtts if rtt >= NOT_SLOWER_FROM_RTT_MS]
    label = _LABELS[DUPLICATE_ELSEWHERE]
    if (missing := _not_run(report, 2)) is not None or not rtts:
        target = f"RTT {NOT_SLOWER_FROM_RTT_MS:g} ms and more, {label}: not slower than the baseline (median)"
        reason = missing or f"no RTT of {NOT_SLOWER_FROM_RTT_MS:g} ms or more run"
        yield Verdict(target, "not measured", reason=reason)
        return
    for rtt in rtts:
        row = report.find(DUPLICATE_ELSEWHERE, "latency", rtt)
        target = f"RTT {rtt:g} ms, {label}: not slower than the baseline (median)"
        reason = _shortfall(report, DUPLICATE_ELSEWHERE, row, 1.0)
        yield _verdict(target, (row.ratio or 0.0) >= 1.0, _ratios(row), reason)


def _no_case_slower(report: Report, rtt: float, *, http: bool = False) -> Verdict:
    if http:
        target = f"over HTTP, RTT {rtt:g} ms: no case 1-2 row slower than the baseline (latency medians)"
    else:
        target = f"RTT {rtt:g} ms: no case slower than the baseline (latency medians, storm errors)"
    if rtt not in report.rtts:
        return Verdict(target, "not measured", reason=f"RTT {rtt:g} ms not run")
    rows = [
        r
        for r in report.metrics
        if r.rtt_ms == rtt and r.unit in ("ms", "%") and (HTTP_MARK in r.case) == http
    ]
    if not rows:
        return Verdict(target, "not measured", reason="cases 1-2 not run" if http else "cases 1-3 not run")
    slower = [r for r in rows if r.ratio is not None and r.ratio < 1.0]
    measured = (
        "slower: " + "; ".join(f"{r.case} {r.name} {ratio_text(r.ratio)}" for r in slower)
        if slower
        else f"all {len(rows)} rows at least 1x"
    )
    parts = [
        f"{r.case} {r.name}: ours {r.ours.median:.2f} {r.unit} against the baseline's "
        f"{r.baseline.median:.2f} on the median"
        for r in slower
    ]
    # For a slower latency of case 1 or 2, how much of each side's time its RPCs account for.
    accounted = [
        line
        for r in slower
        if r.name == "latency"
        for prefix in _RPC_ROWS
        if r.case.startswith(prefix) and (HTTP_MARK in prefix) == http
        for line in _rpc_cost(report, rtt, prefix, r.ours.median, r.baseline.median)
    ]
    reason = "; ".join([*parts, *(accounted or _rpc_cost(report, rtt)), _profile(rtt, http=http)])
    return _verdict(target, not slower, measured, reason)


def _cold_start(report: Report) -> Verdict:
    target = "case 5: a cold start (spawn to the first run's answer) no slower than the baseline's (median)"
    if (missing := _not_run(report, 5)) is not None:
        return Verdict(target, "not measured", reason=missing)
    row = report.find(COLD_START, COLD_START_METRIC)
    reason = (
        f"ours took {row.ours.median:.0f} ms on the median against the baseline's "
        f"{row.baseline.median:.0f} ms; the import table says which dependency's import makes the difference"
    )
    return _verdict(target, (row.ratio or 0.0) >= 1.0, _ratios(row), reason)


def _storms(report: Report) -> Iterator[Verdict]:
    errors_target = "case 3: zero errors (ours), at every RTT"
    executions_target = "case 3: exactly one execution per run (ours), at every RTT"
    if (missing := _not_run(report, 3)) is not None:
        yield Verdict(errors_target, "not measured", reason=missing)
        yield Verdict(executions_target, "not measured", reason=missing)
        return
    ours = {rtt: by_label["ours"] for rtt, by_label in report.storm_results.items()}
    storms = [storm for results in ours.values() for storm in results]
    errors = sum(storm.errors for storm in storms)
    reason = (
        "errors per RTT: "
        + ", ".join(f"{rtt:g} ms {sum(s.errors for s in results)}" for rtt, results in ours.items())
        + "; every delivery of a storm is answered 200 (executed or duplicate) or 409 (in progress)"
    )
    yield _verdict(errors_target, errors == 0, f"{errors} errors in {len(storms)} storms", reason)
    reason = (
        "executions per storm by RTT: "
        + ", ".join(f"{rtt:g} ms {[s.executions for s in results]}" for rtt, results in ours.items())
        + f"; each storm is {STORM_SIZE} deliveries of one run, which executes once"
    )
    yield _verdict(
        executions_target,
        all(storm.executions == 1 for storm in storms),
        f"executions per storm: {sorted({storm.executions for storm in storms})}",
        reason,
    )


def _ratios(row: Metric) -> str:
    return f"{ratio_text(row.ratio)} on the median, {ratio_text(row.p95_ratio)} on p95"


def _shortfall(report: Report, prefix: str, row: Metric, ratio: float) -> str:
    """Why `row` (a latency at one RTT) misses `ratio`, from what the report holds."""
    rtt = row.rtt_ms or 0.0
    ours, base = row.ours.median, row.baseline.median
    allowed = base / ratio
    across = sorted(report.rows(prefix, "latency"), key=lambda r: r.rtt_ms or 0.0)
    return "; ".join(
        [
            f"{ratio_text(row.ratio)} is {ratio - (row.ratio or 0.0):.2f}x short of {ratio:g}x: ours took "
            f"{ours:.2f} ms on the median, {ours - allowed:.2f} ms more than the {allowed:.2f} ms "
            f"that {ratio:g}x of the baseline's {base:.2f} ms allows",
            "the ratio at each RTT: " + ", ".join(f"{r.rtt_ms:g} ms {ratio_text(r.ratio)}" for r in across),
            *_rpc_cost(report, rtt, prefix, ours, base),
            _profile(rtt, http=HTTP_MARK in prefix),
        ]
    )


def _rpc_cost(
    report: Report, rtt: float, prefix: str | None = None, ours: float = 0.0, base: float = 0.0
) -> list[str]:
    """What one Firestore RPC costs on this route and, for a case, how much of each side's
    median its RPCs account for: the rest is time spent around them."""
    one = report.one_read.get(rtt)
    if one is None:
        return []
    cost = f"one Firestore read at RTT {rtt:g} ms costs {one.median:.2f} ms on the median"
    rpcs = [r for r in report.rows(prefix, _RPC_ROWS[prefix]) if r.rtt_ms == rtt] if prefix else []
    if not rpcs:
        return [cost]
    (row,) = rpcs
    n_ours, n_base = row.ours.median, row.baseline.median
    return [
        f"{cost}: ours' {n_ours:g} RPCs account for {n_ours * one.median:.2f} ms of its {ours:.2f} ms "
        f"({ours - n_ours * one.median:.2f} ms around them), the baseline's {n_base:g} for "
        f"{n_base * one.median:.2f} ms of its {base:.2f} ms"
    ]


def _profile(rtt: float, *, http: bool = False) -> str:
    if http:
        return "where ours spends a delivery over HTTP: the breakdown table (bench/breakdown.py)"
    return f"where ours spends a first delivery: `{PROFILE_COMMAND.format(rtt=rtt)}` (cProfile)"
