"""`make bench`: ours against the documented flow, side by side, in one run, on the emulator.

Absolute times on a small shared machine are noisy; the ratios between two implementations
measured in turns on the same emulator are what the report is for. Cases 1-3 run once per
modelled round-trip time to Firestore (bench/network.py), cases 1-2 both in process and over
HTTP through the Functions Framework (bench/over_http.py), with a breakdown of one delivery's
time over HTTP (bench/breakdown.py); cases 4-6 on the direct loopback; case 7, a stack of many
jobs, and the hourly audit of an hour of 1,000 jobs on the emulator (bench/scale.py).
Progress goes to stderr as it runs: which RTT, which case, which round.

Every case also reports the CPU time of the serving process (bench/cpu.py) beside its wall
time. Cloud Run's default function instance has a sixth of a vCPU, so cases 1-2 over HTTP and
case 7's audit run again with each serving process confined to that quota by a cgroup
(bench/cpu_quota.py; root and a cgroup file system needed, else one line says why and only the
unconfined numbers are reported). A full run also records this release's CPU numbers in
bench/results/cpu-history.json and draws them, release by release (bench/cpu_history.py).

    python -m bench.run                       # everything; saved to bench/results/ with the chart
    python -m bench.run --quick               # smoke run, printed only
    python -m bench.run --cases 1,2 --rtt 0,10 --repeats 4
    python -m bench.run --profile --rtt 10    # where ours spends a first delivery (cProfile)
    python -m bench.run --cases 7 --merge     # case 7 alone, merged into the saved results
    python -m bench.run --quick --no-quota    # without the runs at a sixth of a vCPU
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
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from bench import breakdown, chart, cpu_history, inprocess, over_http, scale, served
from bench.cpu_quota import SIXTH_OF_A_VCPU, CpuQuotas, Unavailable, cpu_quotas
from bench.inprocess import Progress
from bench.network import firestore_route
from bench.report import CHART_SUFFIX, TARGETS_HEADING, Report
from bench.stats import Summary
from localrun.emulator import EMULATOR_HOST_ENV, firestore_emulator

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ALL_CASES = (1, 2, 3, 4, 5, 6, 7)
DEFAULT_RTTS_MS = (0.0, 2.0, 10.0, 30.0)
DEFAULT_REPEATS = 10
QUICK_REPEATS = 2
DELIVERIES_PER_REPEAT = 20  # cases 1 and 2: fresh runs per round, enough for a meaningful p95
DEFAULT_STORMS = 5  # case 3, per RTT: the baseline's storms take seconds each (its retries back off)
HTTP_REQUESTS_PER_REPEAT = 200
QUICK_HTTP_REQUESTS = 48
# Case 6: distinct jobs per repeat, and fresh runs of each (a run id never seen before).
MANY_JOBS = 100
RUNS_PER_JOB = 4
QUICK_MANY_JOBS = 16
# Runs of both before anything is timed: the emulator's JVM compiles its hot paths meanwhile.
EMULATOR_WARM_UP_ROUNDS = 100
QUICK_WARM_UP_ROUNDS = 10
ONE_READS = 40  # reads per RTT for the one-RPC row
# The round trips at which one delivery's time over HTTP is broken down, and how many probed
# requests of each kind measure it.
BREAKDOWN_RTTS_MS = (0.0, 10.0)
BREAKDOWN_REQUESTS = 100
QUICK_BREAKDOWN_REQUESTS = 20
# Case 7 in quick mode: one small stack, its program not run under mocks, and a small audit.
QUICK_SCALE_JOBS = (10,)
QUICK_AUDIT_JOBS = 10


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
        "load_before": _load(),
        "load_after": _load(),
        "python_dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
    }


def _load() -> str:
    """The 1-minute load average: on 2 shared cores, the context every number needs."""
    return f"{os.getloadavg()[0]:.2f}"


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
    emulator_host: str,
    cases: Sequence[int],
    repeats: int,
    *,
    rtts: Sequence[float] = DEFAULT_RTTS_MS,
    storms: int = DEFAULT_STORMS,
    quick: bool = False,
    command: str = "",
    progress: Progress | None = None,
    http: bool = True,
    quota: bool = True,
    quota_root: Path | None = None,
) -> Report:
    """Run the chosen cases against a running emulator; the smoke test calls this directly
    (`http=False`: cases 1-2 in process only; tests/bench/test_over_http.py covers HTTP).
    `quota`: also run cases 1-2 over HTTP and case 7's audit at a sixth of a vCPU, in cgroups
    under `quota_root` (default: where the cpu controller is mounted)."""
    started = time.perf_counter()
    say = progress or _printer(started)
    os.environ[EMULATOR_HOST_ENV] = emulator_host  # the SDK uses anonymous credentials then
    project = f"bench-{uuid.uuid4().hex[:8]}"
    report = Report(command, repeats, storms, sorted(cases), sorted(rtts), machine_facts())
    with contextlib.ExitStack() as stack:
        quotas: CpuQuotas | Unavailable | None = None
        if quota and ((http and {1, 2} & set(cases)) or 7 in cases):
            quotas = stack.enter_context(cpu_quotas(SIXTH_OF_A_VCPU, quota_root))
            report.cpu_quota = quotas.reason if isinstance(quotas, Unavailable) else quotas.description
            if isinstance(quotas, Unavailable):
                say(quotas.reason)
        _cases(report, emulator_host, project, cases, quick, http, quotas, say)
    report.seconds = time.perf_counter() - started
    report.machine["load_after"] = _load()
    return report


def _cases(
    report: Report,
    emulator_host: str,
    project: str,
    cases: Sequence[int],
    quick: bool,
    http: bool,
    quotas: CpuQuotas | Unavailable | None,
    say: Progress,
) -> None:
    """The chosen cases, into `report`; the confined runs in `quotas` where there are some."""
    confine = quotas if isinstance(quotas, CpuQuotas) else None
    with inprocess.null_log() as log, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        if {1, 2, 3} & set(cases):
            say("warming the emulator up (direct)")
            inprocess.warm_up(
                (
                    inprocess.ours(emulator_host, project, inprocess.NOOP_JOB, log),
                    inprocess.baseline(emulator_host, project),
                ),
                rounds=QUICK_WARM_UP_ROUNDS if quick else EMULATOR_WARM_UP_ROUNDS,
            )
            for rtt in report.rtts:
                step = _step(say, f"RTT {rtt:g} ms: ")
                with firestore_route(emulator_host, rtt) as host:
                    _modelled(report, host, project, rtt, log, step)
                if http and {1, 2} & set(cases):
                    _over_http(report, emulator_host, project, rtt, Path(tmp), quick, step, confine)
        if 4 in cases:
            count = QUICK_HTTP_REQUESTS if quick else HTTP_REQUESTS_PER_REPEAT
            report.metrics += served.http_throughput(
                emulator_host, project, Path(tmp), report.repeats, count, say
            )
        if 5 in cases:
            metrics, report.imports = served.cold_start(
                emulator_host, project, Path(tmp), report.repeats, say
            )
            report.metrics += metrics
        if 6 in cases:
            jobs = QUICK_MANY_JOBS if quick else MANY_JOBS
            report.metrics += served.many_jobs_throughput(
                emulator_host, project, Path(tmp), report.repeats, jobs, RUNS_PER_JOB, say
            )
        if 7 in cases:
            say("case 7: the stack's costs by its number of jobs, then an hour's audit")
            report.scale = (
                scale.scale_case(project, QUICK_SCALE_JOBS, QUICK_AUDIT_JOBS, program=False, quotas=quotas)
                if quick
                else scale.scale_case(project, quotas=quotas)
            )


def _modelled(report: Report, host: str, project: str, rtt: float, log: TextIO, say: Progress) -> None:
    """Cases 1-3 with Firestore `rtt` ms away; the rows carry the RTT."""
    say("one read at a time")
    report.one_read[rtt] = Summary.of(inprocess.one_read_ms(host, project, ONE_READS))
    if {1, 2} & set(report.cases):
        ours = inprocess.ours(host, project, inprocess.NOOP_JOB, log)
        base = inprocess.baseline(host, project)
        inprocess.warm_up((ours, base))
        rows = inprocess.first_and_duplicates(
            ours, base, report.repeats, DELIVERIES_PER_REPEAT, rtt_ms=rtt, progress=say
        )
        report.metrics += [row for row in rows if int(row.case[0]) in report.cases]
    if 3 in report.cases:
        ours = inprocess.ours(host, project, inprocess.COUNTING_JOB, log)
        base = inprocess.baseline(host, project, inprocess.EXECUTIONS.hit)
        inprocess.warm_up((ours, base))
        metrics, report.storm_results[rtt] = inprocess.duplicate_storm(
            ours, base, report.storms, rtt_ms=rtt, progress=say
        )
        report.metrics += metrics


def _over_http(
    report: Report,
    emulator_host: str,
    project: str,
    rtt: float,
    log_dir: Path,
    quick: bool,
    say: Progress,
    quotas: CpuQuotas | None,
) -> None:
    """Cases 1-2 over HTTP at `rtt`, unconfined and (with `quotas`) at the quota, and the
    breakdown of one delivery there when it is one of BREAKDOWN_RTTS_MS."""
    env = served.server_env(emulator_host, project)
    for quota in (None, quotas) if quotas is not None else (None,):
        rows = over_http.first_and_duplicates(
            env,
            served.OURS_SOURCE,
            served.BASELINE_SOURCE,
            emulator_host,
            rtt,
            log_dir,
            report.repeats,
            DELIVERIES_PER_REPEAT,
            say,
            quota,
        )
        kept = [row for row in rows if int(row.case[0]) in report.cases]
        if quota is None:
            report.metrics += kept
        else:
            report.at_quota += kept
    if rtt in BREAKDOWN_RTTS_MS:
        requests = QUICK_BREAKDOWN_REQUESTS if quick else BREAKDOWN_REQUESTS
        report.breakdowns.append(breakdown.measure(env, emulator_host, rtt, log_dir, requests, say))


def _printer(started: float) -> Progress:
    def say(message: str) -> None:
        print(f"[bench {time.perf_counter() - started:4.0f}s] {message}", file=sys.stderr, flush=True)

    return say


def _step(say: Progress, prefix: str) -> Progress:
    return lambda message: say(prefix + message)


def profile_ours(emulator_host: str, rtt: float, deliveries: int) -> str:
    """cProfile of our first deliveries, to tell our own code's cost from the emulator's."""
    os.environ[EMULATOR_HOST_ENV] = emulator_host
    project = f"profile-{uuid.uuid4().hex[:8]}"
    with inprocess.null_log() as log, firestore_route(emulator_host, rtt) as host:
        ours = inprocess.ours(host, project, inprocess.NOOP_JOB, log)
        base = inprocess.baseline(host, project)
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


def save(report: Report, output: Path) -> Path:
    """Write the .json and .md, and the chart beside them; returns the chart's path."""
    output.parent.mkdir(parents=True, exist_ok=True)
    data = report.as_json()
    chart_path = output.with_name(output.name + CHART_SUFFIX)
    output.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    output.with_suffix(".md").write_text(report.markdown(chart=chart_path.name))
    if any(row["rtt_ms"] is not None for row in data["metrics"]):
        chart.draw(data, chart_path)
    return chart_path


def merge(report: Report, output: Path) -> None:
    """Put case 7 of `report` into the results saved at `output` (.json and .md), keeping the
    other cases' numbers as they were measured: case 7 takes minutes of its own and measures
    nothing the others do, so it can be run alone without re-running them."""
    if report.scale is None:
        raise SystemExit("--merge: only case 7 is merged into saved results; run it with --cases 7")
    json_path, md_path = output.with_suffix(".json"), output.with_suffix(".md")
    data = json.loads(json_path.read_text())
    data["cases"] = sorted({*data["cases"], 7})
    data["scale"] = {**report.scale.as_json(), "machine": report.machine, "command": report.command}
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    text = md_path.read_text()
    section = "\n".join(report.scale.markdown())
    machine = report.machine
    section += (
        f"\nCase 7 measured {machine['date']} with `{report.command}` (took {report.seconds:.0f} s; load "
        f"average {machine['load_before']} before, {machine['load_after']} after).\n\n"
    )
    start = text.find(section.split("\n", 1)[0])
    end = text.find(TARGETS_HEADING)
    if end < 0:
        raise SystemExit(f"--merge: {md_path} has no {TARGETS_HEADING!r} section to put case 7 before")
    md_path.write_text(text[: start if 0 <= start < end else end] + section + text[end:])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPEATS} repeats, fewer requests")
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"rounds per implementation: cases 1-2 deliver {DELIVERIES_PER_REPEAT} fresh runs per round, "
        f"cases 4-6 one HTTP round or cold start each (default {DEFAULT_REPEATS})",
    )
    parser.add_argument("--storms", type=int, help=f"case 3 storms per RTT (default {DEFAULT_STORMS})")
    parser.add_argument("--cases", default=",".join(map(str, ALL_CASES)), help="e.g. 1,2,3 (default: all)")
    parser.add_argument(
        "--rtt",
        default=",".join(f"{r:g}" for r in DEFAULT_RTTS_MS),
        help="round-trip times to Firestore in ms for cases 1-3, e.g. 0,10 (default: %(default)s)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="path without suffix for .json, .md and the chart (default: bench/results/latest for a "
        "full run; quick or partial runs are printed only)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="merge case 7 into the saved results (--output, default bench/results/latest), keeping "
        "the other cases' numbers",
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile ours on case 1 at the first --rtt instead"
    )
    parser.add_argument(
        "--no-quota",
        action="store_true",
        help="skip the runs at a sixth of a vCPU (cases 1-2 over HTTP and case 7's audit, confined "
        "by a cgroup: bench/cpu_quota.py)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cases = sorted({int(c) for c in args.cases.split(",") if c.strip()})
    if not set(cases) <= set(ALL_CASES):
        raise SystemExit(f"--cases: choose from {ALL_CASES}")
    try:
        rtts = sorted({float(r) for r in args.rtt.split(",") if r.strip()})
    except ValueError:
        raise SystemExit(f"--rtt: numbers of milliseconds separated by commas, got {args.rtt!r}") from None
    if not rtts or min(rtts) < 0:
        raise SystemExit(f"--rtt: at least one round-trip time, none negative, got {args.rtt!r}")
    repeats = args.repeats if args.repeats is not None else QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    storms = args.storms if args.storms is not None else QUICK_REPEATS if args.quick else DEFAULT_STORMS
    if repeats < 1 or storms < 1:
        raise SystemExit("--repeats and --storms must be at least 1")
    if args.merge and cases != [7]:
        raise SystemExit(f"--merge: only case 7 is merged into saved results, got --cases {args.cases}")
    command = shlex.join(["make", "bench", *([f"ARGS={shlex.join(sys.argv[1:])}"] if sys.argv[1:] else [])])
    with firestore_emulator() as host:
        if args.profile:
            print(profile_ours(host, rtts[0], repeats * DELIVERIES_PER_REPEAT))
            return 0
        report = run_bench(
            host,
            cases,
            repeats,
            rtts=rtts,
            storms=storms,
            quick=args.quick,
            command=command,
            quota=not args.no_quota,
        )
    print(report.markdown())
    if args.merge:
        merge(report, args.output or RESULTS_DIR / "latest")
        print(f"merged case 7 into {(args.output or RESULTS_DIR / 'latest').with_suffix('.md')}")
        return 0
    output = args.output
    full = not args.quick and args.repeats is None and args.storms is None and cases == list(ALL_CASES)
    if output is None and full and rtts == list(DEFAULT_RTTS_MS):
        output = RESULTS_DIR / "latest"
    if output is not None:
        chart_path = save(report, output)
        print(f"saved {output.with_suffix('.json')}, {output.with_suffix('.md')} and {chart_path}")
    if full and output == RESULTS_DIR / "latest":
        history = cpu_history.record(report.as_json(), RESULTS_DIR / cpu_history.HISTORY_FILE)
        cpu_history.draw(history, RESULTS_DIR / cpu_history.HISTORY_CHART)
        print(f"recorded this release's CPU in {RESULTS_DIR / cpu_history.HISTORY_FILE} and its chart")
    for verdict in report.targets():
        if not verdict.met:
            print(f"target {verdict.status}: {verdict.target}: {verdict.reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
