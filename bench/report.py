"""One run of `make bench`: its numbers, the targets judged on them (bench/targets.py), and
how they are written.

Every number is a summary over all samples (median with min and max, and the p95), never a
chosen run; every target is judged on the run that produced the table next to it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench import breakdown
from bench.breakdown import Breakdown
from bench.cpu import CPU_METRIC
from bench.inprocess import STORM_SIZE, StormResult
from bench.over_http import HTTP_MARK, QUOTA_MARK
from bench.scale import ScaleCase
from bench.stats import Metric, Summary, ratio_text
from bench.targets import Verdict, judge

CHART_SUFFIX = "-latency-vs-rtt.svg"
TARGETS_HEADING = "### Targets"
# The CPU table's rows: kind of delivery, and the case its rows start with ({} the mark of
# where it was measured, bench/over_http.py).
CPU_KINDS = (
    ("first delivery", "1. {}first delivery"),
    ("duplicate, another instance", "2. {}duplicate of a completed run, another"),
    ("duplicate, same instance", "2. {}duplicate of a completed run, same"),
)
STORM_CASE = "3. duplicate storm"
NOT_MEASURED = "- | - | - | -"
# Import rows smaller than this (ms, for both) are summed into one row.
IMPORT_ROW_MS = 1.0


@dataclass
class Report:
    command: str
    repeats: int
    storms: int
    cases: list[int]
    rtts: list[float]
    machine: dict[str, Any]
    metrics: list[Metric] = field(default_factory=list)
    storm_results: dict[float, dict[str, list[StormResult]]] = field(default_factory=dict)
    one_read: dict[float, Summary] = field(default_factory=dict)
    imports: dict[str, dict[str, Summary]] = field(default_factory=dict)
    breakdowns: list[Breakdown] = field(default_factory=list)
    scale: ScaleCase | None = None  # case 7
    seconds: float = 0.0
    # The CPU quota of the confined runs (bench/cpu_quota.py), or the one line saying why
    # there are none; and the rows of cases 1-2 over HTTP measured at that quota.
    cpu_quota: str = "not asked for"
    at_quota: list[Metric] = field(default_factory=list)

    def find(self, case_prefix: str, name: str, rtt_ms: float | None = None) -> Metric:
        for row in self.metrics:
            if row.case.startswith(case_prefix) and row.name == name and row.rtt_ms == rtt_ms:
                return row
        raise KeyError(f"{case_prefix} {name} at RTT {rtt_ms}")

    def rows(self, case_prefix: str, name: str) -> list[Metric]:
        return [r for r in self.metrics if r.case.startswith(case_prefix) and r.name == name]

    def targets(self) -> list[Verdict]:
        """Every target, judged on this run (bench/targets.py)."""
        return judge(self)

    def as_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "repeats": self.repeats,
            "storms_per_rtt": self.storms,
            "cases": self.cases,
            "rtts_ms": self.rtts,
            "seconds": round(self.seconds, 1),
            "machine": self.machine,
            "metrics": [row.as_json() for row in self.metrics],
            "cpu_quota": self.cpu_quota,
            "metrics_at_cpu_quota": [row.as_json() for row in self.at_quota],
            "one_read_ms": {f"{rtt:g}": asdict(summary) for rtt, summary in self.one_read.items()},
            "storms": {
                f"{rtt:g}": {
                    label: [
                        {"executions": r.executions, "errors": r.errors, "conflicts_409": r.conflicts}
                        for r in results
                    ]
                    for label, results in by_label.items()
                }
                for rtt, by_label in self.storm_results.items()
            },
            "import_ms_by_dependency": {
                label: {owner: asdict(summary) for owner, summary in owners.items()}
                for label, owners in self.imports.items()
            },
            "breakdowns": [b.as_json() for b in self.breakdowns],
            "targets": [verdict.as_json() for verdict in self.targets()],
            **({"scale": self.scale.as_json()} if self.scale is not None else {}),
        }

    def markdown(self, chart: str | None = None) -> str:
        lines: list[str] = []
        modelled = [r for r in self.metrics if r.rtt_ms is not None]
        in_process = [r for r in modelled if HTTP_MARK not in r.case]
        over_http = [r for r in modelled if HTTP_MARK in r.case]
        if in_process:
            lines += _modelled_table(
                "### Cases 1-3: a round trip between the function and Firestore (`bench/network.py`)",
                in_process,
            )
        if over_http:
            lines += _modelled_table(
                "### Cases 1-2 over HTTP: both served by the Functions Framework, as Cloud Scheduler "
                "calls them (`bench/over_http.py`), RPCs counted on the wire",
                over_http,
            )
        if self.at_quota:
            lines += _modelled_table(
                f"### Cases 1-2 over HTTP, every instance confined to {self.cpu_quota}",
                self.at_quota,
            )
        lines += self._cpu_table()
        if self.breakdowns:
            lines += [*breakdown.markdown(self.breakdowns), ""]
        if self.one_read:
            lines += [
                "One Firestore read on the same route, timed alone (what one RPC costs there: the "
                "RTT plus the proxy's, the emulator's and the client's own time):",
                "",
                "| RTT | median (ms) | p95 (ms) |",
                "| --- | --- | --- |",
            ]
            lines += [
                f"| {rtt:g} ms | {_num(s.median)} | {_num(s.p95)} |" for rtt, s in self.one_read.items()
            ]
            lines.append("")
        direct = [r for r in self.metrics if r.rtt_ms is None]
        if direct:
            lines += [
                "### Cases 4-6: throughput and cold start (direct loopback to the emulator)",
                "",
                "| Case | Metric | Ours: median [min..max] | Ours p95 | Baseline: median [min..max] "
                "| Baseline p95 | Ours better by |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            for row in direct:
                lines.append(
                    f"| {row.case} | {row.name} ({row.unit}) | {_spread(row.ours)} | {_num(row.ours.p95)} "
                    f"| {_spread(row.baseline)} | {_num(row.baseline.p95)} | {ratio_text(row.ratio)} |"
                )
            lines.append("")
        if self.imports:
            lines += [*self._imports_table(), ""]
        if self.scale is not None:
            lines += self.scale.markdown()
        lines += [TARGETS_HEADING, ""]
        lines += [verdict.markdown() for verdict in self.targets()]
        for rtt, by_label in self.storm_results.items():
            conflicts = {k: sum(r.conflicts for r in v) for k, v in by_label.items()}
            total = {k: len(v) * STORM_SIZE for k, v in by_label.items()}
            ours, base = (f"{conflicts[k]}/{total[k]}" for k in ("ours", "baseline"))
            lines.append(
                f"- case 3 at RTT {rtt:g} ms, 409 'in progress' answers (a designed retry, not an error): "
                f"ours {ours}, baseline {base}"
            )
        if chart:
            lines += ["", f"![Latency against the round trip to Firestore, and the storm's errors]({chart})"]
        machine = self.machine
        lines += [
            "",
            f"Command: `{self.command}` ({self.repeats} repeats, {self.storms} storms per RTT; took "
            f"{self.seconds:.0f} s; load average {machine['load_before']} before, {machine['load_after']} "
            f"after). Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), Python {machine['python']}, "
            f"{machine['emulator']}, google-cloud-firestore {machine['google-cloud-firestore']}, "
            f"functions-framework {machine['functions-framework']}; measured {machine['date']}.",
        ]
        return "\n".join(lines) + "\n"

    def _cpu_table(self) -> list[str]:
        """CPU beside wall time: per kind of delivery at the lowest RTT run (over HTTP, or in
        process where HTTP was not run), unconfined and at the quota; and per audited run."""
        served = HTTP_MARK if any(HTTP_MARK in r.case for r in self.metrics) else ""
        lines: list[str] = []
        for label, case in CPU_KINDS:
            unconfined = _cpu_cells(self.metrics, case.format(served), "latency")
            at_quota = _cpu_cells(self.at_quota, case.format(QUOTA_MARK), "latency")
            if unconfined != NOT_MEASURED:
                lines.append(f"| {label} | {unconfined} | {at_quota} |")
        storm = _cpu_cells(self.metrics, STORM_CASE, "latency p95 per storm")
        if storm != NOT_MEASURED:
            lines.append(
                f"| storm, per delivery (in process; wall: the storm's p95) | {storm} | {NOT_MEASURED} |"
            )
        if self.scale is not None:
            lines.append(self.scale.cpu_row())
        if not lines:
            return []
        rtts = [r.rtt_ms for r in self.metrics if r.name == CPU_METRIC and r.rtt_ms is not None]
        parts = []
        if rtts:
            parts.append(
                f"medians per delivery {'over HTTP' if served else 'in process'} at RTT {min(rtts):g} ms"
            )
        if self.scale is not None:
            parts.append("the audit's CPU per run it judged")
        return [
            "### CPU per delivery and per audited run",
            "",
            "The CPU time of the serving process (over HTTP the Functions Framework's server and its "
            "worker, read from outside them; in process the bench's own, every thread's) beside the "
            f"wall time: {'; '.join(parts)}. Quota: {self.cpu_quota}.",
            "",
            "| Delivery | Ours CPU (ms) | Ours wall (ms) | Baseline CPU (ms) | Baseline wall (ms) "
            "| Ours CPU at quota | Ours wall at quota | Baseline CPU at quota | Baseline wall at quota |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *lines,
            "",
        ]

    def _imports_table(self) -> list[str]:
        ours, base = self.imports.get("ours", {}), self.imports.get("baseline", {})
        owners = sorted(
            set(ours) | set(base),
            key=lambda o: -max(_median(ours.get(o)), _median(base.get(o))),
        )
        shown = [o for o in owners if max(_median(ours.get(o)), _median(base.get(o))) >= IMPORT_ROW_MS]
        rest = [o for o in owners if o not in shown]
        lines = [
            "### Cold start: import time by dependency (median of fresh interpreters, `-X importtime`)",
            "",
            "| Imported code | Ours (ms) | Baseline (ms) |",
            "| --- | --- | --- |",
        ]
        for owner in shown:
            lines.append(f"| {owner} | {_cell(ours.get(owner))} | {_cell(base.get(owner))} |")
        if rest:
            lines.append(
                f"| {len(rest)} others, each under {IMPORT_ROW_MS:g} ms | "
                f"{_num(sum(_median(ours.get(o)) for o in rest))} | "
                f"{_num(sum(_median(base.get(o)) for o in rest))} |"
            )
        lines.append(
            f"| **sum of medians** | {_num(sum(_median(s) for s in ours.values()))} "
            f"| {_num(sum(_median(s) for s in base.values()))} |"
        )
        return lines


def _modelled_table(title: str, rows: list[Metric]) -> list[str]:
    lines = [
        title,
        "",
        "| RTT | Case | Metric | Ours: median [min..max] | Ours p95 | Baseline: median [min..max] "
        "| Baseline p95 | Ours better by (median) | (p95) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in sorted(rows, key=lambda r: (r.case[:1], r.rtt_ms or 0.0)):
        lines.append(
            f"| {row.rtt_ms:g} ms | {row.case} | {row.name} ({row.unit}) | {_spread(row.ours)} "
            f"| {_num(row.ours.p95)} | {_spread(row.baseline)} | {_num(row.baseline.p95)} "
            f"| {ratio_text(row.ratio)} | {ratio_text(row.p95_ratio)} |"
        )
    return [*lines, ""]


def _lowest(rows: list[Metric], case: str, name: str) -> Metric | None:
    """The row of `case` and `name` at the lowest RTT it was run at."""
    found = [r for r in rows if r.case.startswith(case) and r.name == name]
    return min(found, key=lambda r: r.rtt_ms or 0.0) if found else None


def _cpu_cells(rows: list[Metric], case: str, wall: str) -> str:
    """Ours CPU, ours wall, baseline CPU, baseline wall (medians) of `case` at its lowest RTT;
    NOT_MEASURED when it was not run."""
    cpu, latency = _lowest(rows, case, CPU_METRIC), _lowest(rows, case, wall)
    if cpu is None or latency is None:
        return NOT_MEASURED
    medians = (cpu.ours.median, latency.ours.median, cpu.baseline.median, latency.baseline.median)
    return " | ".join(_num(value) for value in medians)


def _median(summary: Summary | None) -> float:
    return summary.median if summary is not None else 0.0


def _cell(summary: Summary | None) -> str:
    return "-" if summary is None else _num(summary.median)


def _num(value: float) -> str:
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.2f}"


def _spread(summary: Summary) -> str:
    return f"{_num(summary.median)} [{_num(summary.min)}..{_num(summary.max)}]"
