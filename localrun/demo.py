"""`make demo`: watch exactly-once hold under at-least-once delivery, before deploying anything.

Starts the Firestore emulator and the function (Functions Framework, loopback), fires a stack's
upcoming scheduled runs through the local Cloud Scheduler with seeded faults, then judges from
the function's log lines and the run ledger what each run came to. The exit code is the
verdict, so CI can run it. With `--regions 2`, every run is delivered in two regions, one of
them down for a stretch (localrun/regions.py), and the verdict is the same: once per run.

The stack is the demo's own (localrun/stacks/Pulumi.demo.yaml), never the forker's stack files,
which a fork rewrites or deletes; `--stack NAME` reads the forker's Pulumi.NAME.yaml instead.

Exit codes: 0 every run executed exactly once and succeeded; 1 some run executed twice or
never; 2 the demo could not run (bad option, bad stack config, a proxy job, a speed-up whose
compressed timing breaks a timing rule, emulator or server failed to start, an instance never
answered 2xx); 3 every run executed exactly once, but the job failed terminally on some.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.config.schema import REPO_ROOT
from infra.plan.audit_job import with_audit_job
from infra.settings.jobs import JobSettings
from infra.settings.loading import load_stack_settings
from infra.settings.stack import StackSettings
from localrun.compression import fitting_speedup, slowest_round_trip_seconds
from localrun.emulator import EMULATOR_HOST_ENV, EmulatorError, firestore_emulator
from localrun.faults import Fault, FaultRates
from localrun.function_server import FunctionServerError
from localrun.instances import WarmUpError
from localrun.regions import MAX_REGIONS
from localrun.report import reasons, region_lines, render_table, verdict_line
from localrun.simulation import SimulationOptions, shown_path, simulate
from localrun.timeline import write_timeline
from localrun.verdicts import EXIT_CANNOT_RUN, Verdict, exit_code
from ops.context import StackContext
from ops.page import write_page
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.targets.registry import kind_for_handler, kind_of
from policy.scheduler_guardrails.rules.timing import rules as timing

DEFAULT_OUTPUT_DIR = REPO_ROOT / ".demo"
# The demo's own stack: the demo job only, nothing that needs a cloud project.
DEMO_STACKS_DIR = Path(__file__).resolve().with_name("stacks")
DEMO_STACK = "demo"
# The emulator address the demo suggests for one that outlives it (any free port will do).
KEPT_EMULATOR_HOST = "127.0.0.1:8085"


def load_settings(stack: str | None) -> StackSettings:
    """The demo's own stack, or the forker's `Pulumi.<stack>.yaml` at the repository root."""
    return load_stack_settings(stack or DEMO_STACK, stacks_dir=stacks_dir(stack))


def stacks_dir(stack: str | None) -> Path | None:
    """Where the stack's file is: the demo's own folder, or (None) the repository root."""
    return DEMO_STACKS_DIR if stack is None else None


def proxy_refusal(settings: StackSettings, job: JobSettings) -> str | None:
    """Why `job` cannot run locally, when it runs a target kind's proxy: the proxy calls a
    cloud API (Workflows, BigQuery, Cloud Run Admin) the local run has no stand-in for and no
    credentials for, so every attempt would fail and be retried, saying nothing about the
    ledger. Decided by the job's target kind, so a kind added later is refused too."""
    handler = settings.handler_of(job)
    kind = kind_for_handler(handler)
    if kind is None and job.target is not None:
        kind = kind_of(job.target)
    if kind is None:
        return None
    return (
        f"job {job.name!r} runs the {kind.key} proxy ({handler}), which calls the {kind.service} API: "
        "the local run has no stand-in for it and no credentials for the real one, so its "
        "attempts could only fail. Its proxy is tested against loopback fakes instead "
        "(tests/function/targets/); choose another job with --job"
    )


# --- CLI --------------------------------------------------------------------------------------


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a probability between 0 and 1")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every default shown, except where there is none to show: those options' help says what
    happens without them."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


class _Given(argparse.Action):
    """Stores the value and notes that it was given: an explicit speed-up is honoured or
    refused, the default one adapts to the job."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults, rates = SimulationOptions(), FaultRates()
    parser = argparse.ArgumentParser(
        prog="python -m localrun.demo",
        description="Fire a stack's scheduled runs at the local function with at-least-once "
        "faults, and judge each run: executed once and succeeded, executed once and failed "
        "terminally, never executed, or executed more than once.",
        epilog="Exit codes: 0 every run executed exactly once and succeeded; 1 some run executed "
        "twice or never; 2 the demo could not run; 3 every run executed exactly once, but the "
        "job failed terminally on some.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--runs", type=_positive_int, default=defaults.runs, help="scheduled runs to fire")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of the fault plan")
    parser.add_argument(
        "--speedup",
        type=_positive,
        action=_Given,
        default=defaults.speedup,
        help="clock compression: deadline, backoffs, time limit, lease and retention all run this "
        "much faster; the lease no shorter than a slow Firestore allows. Unless given, a job whose "
        "timing the floored durations would break runs at a smaller speed-up that it passes",
    )
    parser.set_defaults(speedup_given=False)
    parser.add_argument(
        "--interval", type=float, default=defaults.interval_seconds, help="wall-clock seconds between runs"
    )
    parser.add_argument(
        "--instances",
        type=_positive_int,
        default=defaults.instances,
        help="function instances; a crashed or ended one is restarted while the others keep serving "
        "(1: the whole service refuses connections until it is back)",
    )
    parser.add_argument(
        "--firestore-rtt-ms",
        type=_non_negative,
        default=defaults.firestore_rtt_seconds * 1000,
        help="add this round-trip time to every Firestore call of the function, through a delaying "
        "proxy in front of the emulator, as if the database were far away",
    )
    parser.add_argument(
        "--regions",
        type=int,
        choices=range(1, MAX_REGIONS + 1),
        default=defaults.regions,
        help="regions every run is delivered in: with 2, a second scheduler and function (the "
        "stack's region with -b appended) deliver every run too, a moment later or sooner, and the "
        "stack's own region is down for a stretch of runs, which the other delivers alone",
    )
    parser.add_argument(
        "--stack",
        help="read your Pulumi.STACK.yaml at the repository root (default: the demo's own stack, "
        "localrun/stacks/Pulumi.demo.yaml)",
    )
    parser.add_argument("--job", help="job name (default: the stack's first job)")
    for fault in Fault:
        parser.add_argument(
            f"--{fault.value.replace('_', '-')}-rate",
            type=_rate,
            default=rates.rate(fault),
            dest=f"{fault.value}_rate",
            help=f"probability per run of a {fault.value} fault",
        )
    parser.add_argument(
        "--output-dir", type=Path, help="report, timeline and logs (default: .demo/ at the repository root)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        slowest = slowest_round_trip_seconds()
        round_trip = slowest + args.firestore_rtt_ms / 1000
        rates = FaultRates(**{f.value: getattr(args, f"{f.value}_rate") for f in Fault})
        rates.validate()
        settings = load_settings(args.stack)
        job = _pick_job(settings, args.job)
        if (refused := proxy_refusal(settings, job)) is not None:
            print(f"demo: {refused}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        fitting = fitting_speedup(settings, job, args.speedup, round_trip_seconds=round_trip)
        speedup = args.speedup if args.speedup_given else fitting
        options = SimulationOptions(
            args.runs,
            args.seed,
            speedup,
            args.interval,
            args.instances,
            rates,
            firestore_rtt_seconds=args.firestore_rtt_ms / 1000,
            regions=args.regions,
            slowest_round_trip_seconds=slowest,
        )
        problems = options.compressed(settings, job).problems(settings, job)
    except (ValueError, SettingsError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    for violation in timing.check_job_timing(settings.job_timing(job)):
        print(f"timing advisory ({violation.rule}): {violation.message}", file=sys.stderr)
    if problems and args.speedup_given:
        for problem in problems:
            print(f"demo: {problem}", file=sys.stderr)
        print(
            f"demo: a run at speed-up x{speedup:g} could not pass; choose a smaller --speedup "
            f"(x{fitting:g} passes), or leave it out",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    if speedup != args.speedup:
        print(
            f"demo: speed-up x{speedup:g} for {job.name!r}, not x{args.speedup:g}: its timing could not "
            "pass with the durations the local run floors for Firestore (--help)",
            file=sys.stderr,
        )
    for problem in problems:  # uncompressed, only the floors are left to say it
        print(f"demo: warning: {problem}", file=sys.stderr)
    out_dir: Path = args.output_dir or DEFAULT_OUTPUT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    given_emulator = os.environ.get(EMULATOR_HOST_ENV)
    try:
        print("starting the Firestore emulator ...", file=sys.stderr, flush=True)
        firestore_project = f"demo-{uuid.uuid4().hex[:8]}"
        with firestore_emulator(log_dir=out_dir) as host:
            report = simulate(
                settings,
                job,
                options,
                emulator_host=host,
                firestore_project=firestore_project,
                log_dir=out_dir,
                progress=sys.stderr,
            )
            page_path = write_demo_page(
                settings, job, host, firestore_project, out_dir / "page.html", len(report["results"])
            )
    except (EmulatorError, FunctionServerError, WarmUpError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    report["total_seconds"] = round(time.monotonic() - started, 2)
    # An emulator the demo was given outlives it, and `ops` can read the run's records there.
    report["ledger"]["emulator_kept"] = kept = bool(given_emulator)
    if kept:
        report["ledger"]["ops_command"] = ops_command(
            settings.stack, stacks_dir(args.stack), report["ledger"]
        )
    report_path = out_dir / "report.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    timeline_path = write_timeline(report, out_dir / "timeline.png")
    print(render_table(report))
    for line in region_lines(report):
        print(line)
    for line in reasons(report):
        print(line)
    print(verdict_line(report))
    print(f"report: {shown_path(report_path)} ({report['total_seconds']:g} s)")
    print(f"timeline: {shown_path(timeline_path)}")
    print(f"page: {shown_path(page_path)} (what `python -m ops page` writes of a deployed stack)")
    for line in ledger_lines(report["ledger"]):
        print(line)
    return exit_code([Verdict(run["verdict"]) for run in report["results"]])


def write_demo_page(
    settings: StackSettings,
    job: JobSettings,
    emulator_host: str,
    firestore_project: str,
    path: Path,
    runs: int,
) -> Path:
    """The stack's page (ops/page.py) from the demo's ledger, written while the demo's emulator
    is still up: the job the demo ran, and as many of its runs as it delivered. The stack's
    other jobs, and the job's earlier runs, have no records here and would show as missed."""
    context = StackContext(settings.stack, with_audit_job(settings), firestore_project, "(default)")
    previous = os.environ.get(EMULATOR_HOST_ENV)
    os.environ[EMULATOR_HOST_ENV] = emulator_host  # where StackContext.firestore() reads the ledger
    try:
        return write_page(context, path, jobs=[job.name], runs=runs)
    finally:
        if previous is None:
            del os.environ[EMULATOR_HOST_ENV]
        else:
            os.environ[EMULATOR_HOST_ENV] = previous


def ops_command(stack: str, folder: Path | None, ledger: Mapping[str, Any]) -> str:
    """`python -m ops status` reading a local run's ledger, ready to paste: the emulator, the
    run's project of its own and its database, and the stack (the demo's own is not at the
    repository root, where ops looks by default). Run from the repository root, where `-m ops`
    is found."""
    argv = [_from_root(Path(sys.executable)), "-m", "ops", "status", "--stack", stack]
    if folder is not None:
        argv += ["--stacks-dir", _from_root(folder)]
    argv += ["--firestore-project", ledger["project"], "--database", ledger["database"]]
    command = f"{EMULATOR_HOST_ENV}={ledger['emulator_host']} {shlex.join(argv)}"
    return command if Path.cwd().resolve() == REPO_ROOT else f"cd {shlex.quote(str(REPO_ROOT))} && {command}"


def ledger_lines(ledger: Mapping[str, Any]) -> list[str]:
    """Where the run's records are, and how to read them with the operators' CLI. The demo's
    own emulator stops with it, so then it says how to keep one that does not."""
    where = f"project {ledger['project']}, database {ledger['database']}"
    if ledger["emulator_kept"]:
        return [
            f"ledger: {where} in the emulator at {ledger['emulator_host']}; read it with:",
            f"  {ledger['ops_command']}",
        ]
    return [
        f"ledger: {where} in the emulator the demo started, stopped with it. To read a demo's "
        "ledger with `python -m ops`, run the demo on an emulator that stays up, and it prints the "
        "command:",
        f"  gcloud emulators firestore start --host-port={KEPT_EMULATOR_HOST} &",
        f"  {EMULATOR_HOST_ENV}={KEPT_EMULATOR_HOST} make demo",
    ]


def _from_root(path: Path) -> str:
    """`path` relative to the repository root when inside it (not resolved: a virtualenv's
    python is a link), else as it is."""
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _pick_job(settings: StackSettings, name: str | None) -> JobSettings:
    """The job `--job` names as the stack config does (default: the stack's first job). A job
    missing from the demo's own stack is most likely one of the forker's: say where it is."""
    if name is None:
        return settings.jobs[0]
    try:
        return settings.job_named(name)
    except SettingsError as error:
        if settings.stack != DEMO_STACK:
            raise
        hint = f"a job of your own stack is run with --stack NAME --job {name}"
        raise SettingsError(f"{error}; {hint}") from None


if __name__ == "__main__":
    sys.exit(main())
