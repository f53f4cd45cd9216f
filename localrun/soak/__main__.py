"""`make soak`: thousands of runs under random faults, counted by an independent checker.

Exit codes: 0 every run executed once (or was given up by the scheduler, counted); 1 some run
executed twice, or never although the scheduler did not give up; 2 the soak could not run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from infra.config.schema import REPO_ROOT
from infra.settings.loading import load_stack_settings
from localrun.compression import slowest_round_trip_seconds
from localrun.demo import DEMO_STACKS_DIR
from localrun.emulator import EmulatorError, firestore_emulator
from localrun.function_server import FunctionServerError
from localrun.instances import WarmUpError
from localrun.regions import MAX_REGIONS
from localrun.soak.plan import SoakFault, plan_soak
from localrun.soak.report import build_report, failure_lines, markdown, write_chart
from localrun.soak.runner import SoakOptions, soak
from policy.scheduler_guardrails.rules.config.problems import SettingsError

SOAK_STACK = "soak"
DEFAULT_OUTPUT_DIR = REPO_ROOT / ".soak"
EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN = 0, 1, 2


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} must be at least {minimum}")
        return value

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = SoakOptions()
    parser = argparse.ArgumentParser(
        prog="python -m localrun.soak",
        description="Fire many runs of several jobs at several local function instances under random "
        "faults drawn from a seed, and count every execution independently.",
        epilog="Exit codes: 0 no run executed twice or was lost; 1 some run was; 2 the soak could not run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--runs", type=_at_least(1), default=defaults.runs, help="scheduled runs to fire")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of every run's fault schedule")
    parser.add_argument(
        "--only", type=_at_least(0), help="replay this run's schedule alone (with the same --seed and --runs)"
    )
    parser.add_argument(
        "--instances", type=_at_least(2), default=defaults.instances, help="function instances in rotation"
    )
    parser.add_argument(
        "--in-flight", type=_at_least(1), default=defaults.in_flight, help="runs under way at once, at most"
    )
    parser.add_argument(
        "--min-each", type=_at_least(0), default=20, help="every fault kind on at least this many runs"
    )
    parser.add_argument(
        "--forced", action=argparse.BooleanOptionalAction, default=True, help="inject forced runs"
    )
    parser.add_argument(
        "--regions",
        type=int,
        choices=range(1, MAX_REGIONS + 1),
        default=defaults.regions,
        help="regions every scheduled run is delivered in: with 2, a second scheduler per job "
        "delivers each run to instances of its own too, and the region_down fault takes one "
        "region's schedulers down for a few seconds",
    )
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR, help="report, chart and logs")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.only is not None and args.only >= args.runs:
        print(
            f"soak: --only {args.only} is not a run of --runs {args.runs} (0..{args.runs - 1})",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    try:
        settings = load_stack_settings(SOAK_STACK, stacks_dir=DEMO_STACKS_DIR)
        round_trip = slowest_round_trip_seconds()
    except (SettingsError, ValueError) as error:
        print(f"soak: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    excluded = () if args.forced else (SoakFault.FORCED,)
    plans = plan_soak(args.runs, args.seed, min_each=args.min_each, excluded=excluded, regions=args.regions)
    options = SoakOptions(
        runs=args.runs,
        seed=args.seed,
        only=args.only,
        instances=args.instances,
        in_flight=args.in_flight,
        forced=args.forced,
        regions=args.regions,
        slowest_round_trip_seconds=round_trip,
    )
    out_dir: Path = args.output_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        print("starting the Firestore emulator ...", file=sys.stderr, flush=True)
        with firestore_emulator(log_dir=out_dir) as host:
            outcome = soak(
                settings,
                plans,
                options,
                emulator_host=host,
                firestore_project=f"soak-{uuid.uuid4().hex[:8]}",
                out_dir=out_dir,
                progress=sys.stderr,
            )
    except (EmulatorError, FunctionServerError, WarmUpError) as error:
        print(f"soak: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    command = "make soak" + (
        f' ARGS="{shlex.join(argv if argv is not None else sys.argv[1:])}"'
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )
    report = build_report(
        seed=args.seed,
        runs=args.runs,
        only=args.only,
        command=command,
        plans=plans,
        judged=outcome.judged,
        injected=outcome.injected,
        stray=outcome.stray,
        facts={
            "duration_seconds": round(outcome.duration_seconds, 1),
            "instances": args.instances,
            "instance_crashes": outcome.instance_crashes,
            "instance_freezes": outcome.instance_freezes,
            "instance_restart_errors": outcome.restart_errors,
            "forced_runs": args.forced,
            "regions": args.regions,
            "timing": outcome.timing,
        },
    )
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    # Every run's verdict, one line each: the report keeps only the failed ones.
    with (out_dir / "verdicts.jsonl").open("w", encoding="utf-8") as verdicts:
        for entry in outcome.judged:
            verdicts.write(json.dumps(entry.to_json()) + "\n")
    (out_dir / "report.md").write_text(markdown(report), encoding="utf-8")
    chart = write_chart(report, out_dir / "outcomes.png")
    print(markdown(report))
    injected = ", ".join(f"{kind} {count}" for kind, count in report["faults_injected"].items())
    print(f"faults injected (runs): {injected}")
    for line in failure_lines(report):
        print(line)
    verdict = "PASS" if report["ok"] else "FAIL"
    o = report["outcomes"]
    print(
        f"{verdict}: {report['runs']} runs (seed {args.seed}), {report['deliveries']} deliveries: "
        f"{o['once']} executed once, {o['twice'] + o['twice_overlapping']} twice, {o['lost']} lost, "
        f"{o['given_up']} given up by the scheduler ({report['duration_seconds']:g} s)"
    )
    print(
        f"report: {out_dir / 'report.json'}, {out_dir / 'report.md'}, every run: {out_dir / 'verdicts.jsonl'}"
    )
    print(f"chart: {chart}")
    return EXIT_OK if report["ok"] else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
