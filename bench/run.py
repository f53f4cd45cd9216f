"""`make bench`: ours against the documented sample, side by side, in one run, on the emulator.

Absolute times on a small shared machine are noisy; the ratios between two implementations
measured in turns on the same emulator are what the report is for. Every number is a summary
over all repeats (median with min and max), never a chosen run.

    python -m bench.run                 # every case, saved to bench/results/latest.{json,md}
    python -m bench.run --quick         # smoke run, printed only
    python -m bench.run --cases 1,3 --repeats 4
    python -m bench.run --profile       # where ours spends a first delivery (cProfile)
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import inprocess, served
from bench.stats import Metric
from localrun.emulator import EMULATOR_HOST_ENV, firestore_emulator

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ALL_CASES = (1, 2, 3, 4, 5, 6)
DEFAULT_REPEATS = 10
QUICK_REPEATS = 2
DELIVERIES_PER_REPEAT = 20  # cases 1 and 2: enough deliveries for a meaningful p95
HTTP_REQUESTS_PER_REPEAT = 200
QUICK_HTTP_REQUESTS = 48
# Case 6: distinct jobs per repeat, and fresh runs of each (a run id never seen before).
MANY_JOBS = 100
RUNS_PER_JOB = 4
QUICK_MANY_JOBS = 16
LATENCY_TARGET_RATIO = 3.0


@dataclass
class Report:
    command: str
    repeats: int
    cases: list[int]
    machine: dict[str, Any]
    metrics: list[Metric] = field(default_factory=list)
    storms: dict[str, list[inprocess.StormResult]] = field(default_factory=dict)
    seconds: float = 0.0

    def find(self, case_prefix: str, name: str) -> Metric:
        for row in self.metrics:
            if row.case.startswith(case_prefix) and row.name == name:
                return row
        raise KeyError(f"{case_prefix} {name}")

    def targets(self) -> list[dict[str, Any]]:
        """The issue's targets, judged on every repeat, not on a summary that could hide one."""
        checks: list[dict[str, Any]] = []
        if 1 in self.cases:
            rpcs = self.find("1.", "Firestore RPCs per run").ours
            latency = self.find("1.", "latency")
            ratio = latency.ratio or 0.0
            p95_ratio = latency.baseline.p95 / latency.ours.p95
            checks.append(
                {
                    "target": "case 1: exactly 2 Firestore RPCs per first delivery (ours)",
                    "met": rpcs.min == rpcs.max == 2,
                    "measured": f"{rpcs.min:g}..{rpcs.max:g} RPCs over {rpcs.n} runs",
                }
            )
            checks.append(
                {
                    "target": f"case 1: at least {LATENCY_TARGET_RATIO:g}x faster than the baseline",
                    "met": ratio >= LATENCY_TARGET_RATIO,
                    "measured": f"{ratio:.2f}x on the median, {p95_ratio:.2f}x on p95",
                }
            )
        if 3 in self.cases:
            ours = self.storms["ours"]
            checks.append(
                {
                    "target": "case 3: zero errors (ours)",
                    "met": all(r.errors == 0 for r in ours),
                    "measured": f"{sum(r.errors for r in ours)} errors in {len(ours)} storms",
                }
            )
            checks.append(
                {
                    "target": "case 3: exactly one execution per run (ours)",
                    "met": all(r.executions == 1 for r in ours),
                    "measured": f"executions per storm: {sorted({r.executions for r in ours})}",
                }
            )
        return checks

    def as_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "repeats": self.repeats,
            "cases": self.cases,
            "seconds": round(self.seconds, 1),
            "machine": self.machine,
            "metrics": [row.as_json() for row in self.metrics],
            "storms": {
                label: [
                    {"executions": r.executions, "errors": r.errors, "conflicts_409": r.conflicts}
                    for r in results
                ]
                for label, results in self.storms.items()
            },
            "targets": self.targets(),
        }

    def markdown(self) -> str:
        lines = [
            "| Case | Metric | Ours: median [min..max] | Ours p95 | Baseline: median [min..max] "
            "| Baseline p95 | Ours better by |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in self.metrics:
            ratio = "n/a (ours is 0)" if row.ratio is None else f"{row.ratio:.2f}x"
            lines.append(
                f"| {row.case} | {row.name} ({row.unit}) | {_spread(row.ours)} | {_num(row.ours.p95)} "
                f"| {_spread(row.baseline)} | {_num(row.baseline.p95)} | {ratio} |"
            )
        lines.append("")
        for check in self.targets():
            mark = "met" if check["met"] else "NOT met"
            lines.append(f"- {check['target']}: **{mark}** ({check['measured']})")
        if "ours" in self.storms:
            conflicts = {k: sum(r.conflicts for r in v) for k, v in self.storms.items()}
            total = {k: len(v) * inprocess.STORM_SIZE for k, v in self.storms.items()}
            lines.append(
                f"- case 3, 409 'in progress' answers (a designed retry, not an error): "
                f"ours {conflicts['ours']}/{total['ours']}, "
                f"baseline {conflicts['baseline']}/{total['baseline']}"
            )
        machine = self.machine
        lines += [
            "",
            f"Command: `{self.command}` ({self.repeats} repeats; took {self.seconds:.0f} s). "
            f"Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), Python {machine['python']}, "
            f"{machine['emulator']}, google-cloud-firestore {machine['google-cloud-firestore']}, "
            f"functions-framework {machine['functions-framework']}; measured {machine['date']}.",
        ]
        return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.2f}"


def _spread(summary: Any) -> str:
    return f"{_num(summary.median)} [{_num(summary.min)}..{_num(summary.max)}]"


def machine_facts() -> dict[str, Any]:
    cpu_model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "emulator": emulator_version(),
        "google-cloud-firestore": metadata.version("google-cloud-firestore"),
        "functions-framework": metadata.version("functions-framework"),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


def emulator_version() -> str:
    try:
        output = subprocess.run(
            ["gcloud", "version", "--format=json"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        versions = json.loads(output)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        return "Firestore emulator (version unknown)"
    emulator, sdk = versions.get("cloud-firestore-emulator", "?"), versions.get("Google Cloud SDK", "?")
    return f"Firestore emulator {emulator} (gcloud {sdk})"


def run_bench(
    emulator_host: str, cases: Sequence[int], repeats: int, *, quick: bool = False, command: str = ""
) -> Report:
    """Run the chosen cases against a running emulator; the smoke test calls this directly."""
    started = time.perf_counter()
    os.environ[EMULATOR_HOST_ENV] = emulator_host  # the SDK uses anonymous credentials then
    project = f"bench-{uuid.uuid4().hex[:8]}"
    report = Report(command, repeats, sorted(cases), machine_facts())
    deliveries = repeats * DELIVERIES_PER_REPEAT
    with inprocess.null_log() as log, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        if {1, 2} & set(cases):
            ours = inprocess.ours(emulator_host, project, inprocess.NOOP_JOB, log)
            base = inprocess.baseline(emulator_host, project)
            inprocess.warm_up((ours, base))
            if 1 in cases:
                report.metrics += inprocess.first_delivery(ours, base, deliveries)
            if 2 in cases:
                report.metrics += inprocess.duplicate_of_completed(ours, base, deliveries)
        if 3 in cases:
            ours = inprocess.ours(emulator_host, project, inprocess.COUNTING_JOB, log)
            base = inprocess.baseline(emulator_host, project, inprocess.EXECUTIONS.hit)
            inprocess.warm_up((ours, base))
            metrics, report.storms = inprocess.duplicate_storm(ours, base, repeats)
            report.metrics += metrics
        if 4 in cases:
            count = QUICK_HTTP_REQUESTS if quick else HTTP_REQUESTS_PER_REPEAT
            report.metrics += served.http_throughput(emulator_host, project, Path(tmp), repeats, count)
        if 5 in cases:
            report.metrics += served.cold_start(emulator_host, project, Path(tmp), repeats)
        if 6 in cases:
            jobs = QUICK_MANY_JOBS if quick else MANY_JOBS
            report.metrics += served.many_jobs_throughput(
                emulator_host, project, Path(tmp), repeats, jobs, RUNS_PER_JOB
            )
    report.seconds = time.perf_counter() - started
    return report


def profile_ours(emulator_host: str, deliveries: int) -> str:
    """cProfile of our first deliveries, to tell our own code's cost from the emulator's."""
    os.environ[EMULATOR_HOST_ENV] = emulator_host
    project = f"profile-{uuid.uuid4().hex[:8]}"
    with inprocess.null_log() as log:
        ours = inprocess.ours(emulator_host, project, inprocess.NOOP_JOB, log)
        base = inprocess.baseline(emulator_host, project)
        inprocess.warm_up((ours, base))
        headers = [ours.runs.headers() for _ in range(deliveries)]
        profiler = cProfile.Profile()
        profiler.enable()
        for one in headers:
            ours.deliver(one)
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)
    return out.getvalue()


def save(report: Report, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps(report.as_json(), indent=2) + "\n")
    output.with_suffix(".md").write_text(report.markdown())


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPEATS} repeats, fewer requests")
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"storms, HTTP rounds and cold starts per implementation; cases 1-2 time "
        f"{DELIVERIES_PER_REPEAT}x as many deliveries (default {DEFAULT_REPEATS})",
    )
    parser.add_argument("--cases", default=",".join(map(str, ALL_CASES)), help="e.g. 1,2,3 (default: all)")
    parser.add_argument(
        "--output",
        type=Path,
        help="path without suffix for .json and .md (default: bench/results/latest for a full run; "
        "quick or partial runs are printed only)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile ours on case 1 instead of benchmarking"
    )
    return parser.parse_args(argv)


@contextlib.contextmanager
def emulator() -> Iterator[str]:
    with firestore_emulator() as host:
        yield host


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cases = sorted({int(c) for c in args.cases.split(",") if c.strip()})
    if not set(cases) <= set(ALL_CASES):
        raise SystemExit(f"--cases: choose from {ALL_CASES}")
    repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
    if repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    command = shlex.join(["make", "bench", *([f"ARGS={shlex.join(sys.argv[1:])}"] if sys.argv[1:] else [])])
    with emulator() as host:
        if args.profile:
            print(profile_ours(host, repeats * DELIVERIES_PER_REPEAT))
            return 0
        report = run_bench(host, cases, repeats, quick=args.quick, command=command)
    print(report.markdown())
    output = args.output
    if output is None and not args.quick and args.repeats is None and cases == list(ALL_CASES):
        output = RESULTS_DIR / "latest"
    if output is not None:
        save(report, output)
        print(f"saved {output.with_suffix('.json')} and {output.with_suffix('.md')}")
    failed = [check["target"] for check in report.targets() if not check["met"]]
    for target in failed:
        print(f"target not met: {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
