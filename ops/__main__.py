"""`python -m ops COMMAND --stack NAME`: day-2 operations of a stack (status, history, next, page,
audit, backfill, redo, run-now, smoke, resume).

Exit statuses are ops.exit_codes.ExitCode, listed at the end of every `--help`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from google.api_core import exceptions as google_exceptions
from google.auth import exceptions as auth_exceptions

import exactly_once
from infra.config.schema import REPO_ROOT
from infra.settings.loading import stack_names
from ops import ledger_view
from ops.catchup import backfill_range
from ops.context import EMULATOR_HOST_ENV, CloudUnreachable, StackContext, UserError, parse_time, utc_now
from ops.delivery import backfill, redo
from ops.exit_codes import ExitCode, exit_codes_text
from ops.google_apis import Endpoints
from ops.history import HISTORY_RUNS, history
from ops.next_runs import NEXT_RUNS, show_next
from ops.page import PAGE_RUNS, page
from ops.resume import resume
from ops.run_now import DEFAULT_WAIT_SECONDS, run_now
from ops.smoke import Smoke

PROG = "python -m ops"


def version_text() -> str:
    """The repository's version (its pyproject.toml, where ops belongs) and the function
    package's it shares code with: an operator's report then says which of each ran."""
    with (REPO_ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return f"{project['name']} {project['version']} (exactly_once {exactly_once.__version__})"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's default in its help: a value as `(default: ...)`, unless the help text
    already says it in words (a default taken from the stack, or computed at run time)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = "default" in text or action.default in (None, argparse.SUPPRESS)
        if shown or action.required or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    epilog = exit_codes_text()
    parser = _Parser(
        prog=PROG,
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog=epilog,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name, help=help_text, description=help_text, epilog=epilog, formatter_class=_HelpFormatter
        )
        sub.add_argument("--stack", required=True, help="the stack whose Pulumi.<stack>.yaml to read")
        sub.add_argument("--firestore-project", help="read the ledger in this project (default: the stack's)")
        sub.add_argument("--database", help="read the ledger in this database (default: the stack's)")
        sub.add_argument(
            "--stacks-dir", type=Path, help="the folder of Pulumi.<stack>.yaml (default: the project's root)"
        )
        return sub

    status = command("status", "latest runs per job: schedule time, status, result, attempt, duration")
    status.add_argument("--job", help="only this job (its name in the stack config; default: every job)")
    status.add_argument("--limit", type=int, default=ledger_view.STATUS_RUNS, help="runs per job")
    status.add_argument("--until", help="latest schedule time to show (RFC 3339; default now)")

    history = command(
        "history",
        "a job's latest runs: schedule time in UTC and the job's zone, verdict, attempt, duration, "
        "why skipped or delivered again; then its manual runs",
    )
    history.add_argument("--job", required=True, help="the job's name in the stack config")
    history.add_argument("--last", type=int, default=HISTORY_RUNS, help="scheduled runs to show")
    history.add_argument("--until", help="latest schedule time to show (RFC 3339; default now)")
    history.add_argument("--json", action="store_true", help="one JSON document instead of text lines")

    upcoming = command(
        "next",
        "a job's next fire times in its zone and in UTC, daylight-saving changes marked (reads no ledger)",
    )
    upcoming.add_argument("--job", required=True, help="the job's name in the stack config")
    upcoming.add_argument("--count", type=int, default=NEXT_RUNS, help="fire times to list")
    upcoming.add_argument("--after", help="list the fire times after this time (RFC 3339; default now)")
    upcoming.add_argument("--json", action="store_true", help="one JSON document instead of text lines")

    stack_page = command(
        "page",
        "write one static HTML page of the stack's jobs: their latest runs coloured by verdict, their "
        "next fire times; prints its path",
    )
    stack_page.add_argument("--output", type=Path, help="the page's path (default: .pages/<stack>.html)")
    stack_page.add_argument("--last", type=int, default=PAGE_RUNS, help="scheduled runs per job")

    resume = command(
        "resume", "end the pause of a job its failed runs paused (pauseAfterFailures): its next run executes"
    )
    resume.add_argument("--job", required=True, help="the job's name in the stack config")

    audit = command(
        "audit", f"expected runs against the ledger; exit {ExitCode.RUN_PROBLEM.value} when a run was missed"
    )
    audit.add_argument("--job", help="only this job (its name in the stack config; default: every job)")
    audit.add_argument("--since", help="first schedule time (RFC 3339; default now - retention)")
    audit.add_argument("--until", help="last schedule time (RFC 3339; default now)")

    for name, help_text in (
        (
            "backfill",
            "re-deliver scheduled runs with their original ScheduleTime: one (--at, sent from here) or "
            "a range (--since/--until, through the stack's catch-up queue)",
        ),
        ("redo", "delete a completed run's record, then re-deliver the run: it executes again"),
    ):
        back = command(name, help_text)
        back.add_argument("--job", required=True, help="the job's name in the stack config")
        if name == "backfill":
            back.add_argument("--at", help="one run's schedule time (RFC 3339)")
            back.add_argument("--since", help="first schedule time of a range (RFC 3339)")
            back.add_argument("--until", help="last schedule time of a range (RFC 3339)")
            back.add_argument(
                "--only-missed",
                action="store_true",
                help="in a range, only the runs no attempt recorded whose retries are over",
            )
            back.add_argument(
                "--queue", help="a range's catch-up queue (default: pulumi stack output catchupQueue)"
            )
        else:
            back.add_argument("--at", required=True, help="the run's schedule time (RFC 3339)")
        back.add_argument("--url", help="the function URL (default: pulumi stack output functionUri)")
        back.add_argument("--invoker", help="account to mint the ID token as (default: the stack's invoker)")
        back.add_argument("--body", help="request body (JSON) instead of the job's configured body")

    now = command(
        "run-now", "run a job now: a manual run of its own (Cloud Scheduler's RunJob); wait for its record"
    )
    now.add_argument("--job", required=True, help="the job's name in the stack config; it really runs")
    now.add_argument("--wait", type=float, default=DEFAULT_WAIT_SECONDS, help="seconds to wait for the run")
    now.add_argument("--scheduler-endpoint", help="Cloud Scheduler API endpoint (default: Google's)")

    smoke = command("smoke", "run a job now, wait for its manual run to complete, check the TTL policy")
    smoke.add_argument(
        "--job",
        help="the job to force-run; it really runs (default: the stack's missed-run audit, which only reads)",
    )
    smoke.add_argument("--wait", type=float, default=DEFAULT_WAIT_SECONDS, help="seconds to wait for the run")
    smoke.add_argument("--scheduler-endpoint", help="Cloud Scheduler API endpoint (default: Google's)")
    smoke.add_argument("--firestore-admin-endpoint", help="Firestore admin API endpoint (default: Google's)")
    return parser


def ledger_header(context: StackContext) -> str:
    """The first line of every command's output: the ledger it reads. One stack's runs may be
    in Google Cloud or in an emulator, in the stack's project or in one of a local run's own,
    and an answer about the wrong ledger (no runs, say) reads just like one about the right."""
    emulator = os.environ.get(EMULATOR_HOST_ENV)
    where = f"the Firestore emulator at {emulator}" if emulator else "Google Cloud"
    return (
        f"stack {context.stack}: ledger in project {context.firestore_project}, "
        f"database {context.database}, on {where}"
    )


def _check_stack_exists(stack: str, stacks_dir: Path | None) -> None:
    """A stack with no config file, refused with the names of those there are: `staging` on a
    checkout that has `dev` and `prod` is a typo or a stack not created yet, and the list says
    which."""
    folder = stacks_dir or REPO_ROOT
    if (folder / f"Pulumi.{stack}.yaml").is_file():
        return
    known = stack_names(folder)
    if not known:
        raise UserError(
            f"no stack {stack!r}: {folder} has no Pulumi.{stack}.yaml, nor any Pulumi.<stack>.yaml "
            "(--stacks-dir names the folder to read)"
        )
    raise UserError(
        f"no stack {stack!r}: {folder} has no Pulumi.{stack}.yaml; its stacks are: {', '.join(known)}"
    )


def run(argv: Sequence[str], out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    stdout = out or sys.stdout
    _check_stack_exists(args.stack, args.stacks_dir)
    context = StackContext.load(args.stack, args.firestore_project, args.database, args.stacks_dir)
    if getattr(args, "job", None) is not None:  # `page` takes none
        # From the config alone, before any client looks for credentials: a typo is a typo
        # on a machine without them too.
        context.job(args.job)
    if args.command == "next":
        # Computed from the config alone: no ledger to name, and nothing before a JSON answer.
        after = parse_time(args.after, "--after") if args.after else utc_now()
        return show_next(context, stdout, job=args.job, count=args.count, after=after, as_json=args.json)
    if not getattr(args, "json", False):
        stdout.write(ledger_header(context) + "\n")
    if args.command == "status":
        until = parse_time(args.until, "--until") if args.until else None
        return ledger_view.status(context, stdout, job=args.job, limit=args.limit, until=until)
    if args.command == "history":
        until = parse_time(args.until, "--until") if args.until else None
        return history(context, stdout, job=args.job, last=args.last, until=until, as_json=args.json)
    if args.command == "page":
        return page(context, stdout, output=args.output, runs=args.last)
    if args.command == "resume":
        return resume(context, stdout, job=args.job)
    if args.command == "audit":
        since = parse_time(args.since, "--since") if args.since else None
        until = parse_time(args.until, "--until") if args.until else None
        return ledger_view.audit(context, stdout, job=args.job, since=since, until=until)
    if args.command == "backfill" and args.at is None:
        return _backfill_range(context, stdout, args)
    if args.command in ("backfill", "redo"):
        if args.command == "backfill" and (args.since or args.until or args.only_missed):
            raise UserError("--at names one run; --since, --until and --only-missed a range: not both")
        deliver = backfill if args.command == "backfill" else redo
        at = parse_time(args.at, "--at")
        return deliver(
            context, stdout, job=args.job, at=at, url=args.url, invoker=args.invoker, body=args.body
        )
    if args.command == "run-now":
        return run_now(context, stdout, Endpoints.from_env(args.scheduler_endpoint), args.job, args.wait)
    endpoints = Endpoints.from_env(args.scheduler_endpoint, args.firestore_admin_endpoint)
    return Smoke(context, stdout, endpoints, wait_seconds=args.wait).run(args.job)


def _backfill_range(context: StackContext, out: TextIO, args: argparse.Namespace) -> int:
    if not (args.since and args.until):
        raise UserError("backfill needs --at (one run), or --since and --until (a range)")
    if args.body is not None:
        raise UserError("--body is for one run (--at): a range is delivered with the job's own body")
    return backfill_range(
        context,
        out,
        job=args.job,
        since=parse_time(args.since, "--since"),
        until=parse_time(args.until, "--until"),
        only_missed=args.only_missed,
        url=args.url,
        invoker=args.invoker,
        queue=args.queue,
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except UserError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    except CloudUnreachable as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return ExitCode.CLOUD_UNREACHABLE
    except auth_exceptions.GoogleAuthError as error:
        print(
            f"{PROG}: no usable Google credentials ({error}); run "
            "`gcloud auth application-default login`, or set FIRESTORE_EMULATOR_HOST for a local ledger",
            file=sys.stderr,
        )
        return ExitCode.CLOUD_UNREACHABLE
    except google_exceptions.GoogleAPIError as error:
        print(f"{PROG}: a Google API call failed: {error}", file=sys.stderr)
        return ExitCode.CLOUD_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
