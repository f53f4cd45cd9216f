"""`python -m ops status|audit|backfill|redo|smoke --stack NAME`: day-2 operations of a stack.

Exit status: 0 fine; 1 the check found a problem (a missed run, a failed smoke step, a
delivery that did not succeed); 2 the command itself was wrong (unknown stack or job, a bad
time, a time off the job's schedule), with one line saying what, and nothing done.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from google.api_core import exceptions as google_exceptions
from google.auth import exceptions as auth_exceptions

from ops import ledger_view
from ops.context import StackContext, UserError, parse_time
from ops.delivery import backfill, redo
from ops.smoke import DEFAULT_WAIT_SECONDS, Endpoints, Smoke

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m ops", description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--stack", required=True, help="the stack whose Pulumi.<stack>.yaml to read")
        sub.add_argument("--firestore-project", help="read the ledger in this project (default: the stack's)")
        sub.add_argument("--database", help="read the ledger in this database (default: the stack's)")
        sub.add_argument(
            "--stacks-dir", type=Path, help="the folder of Pulumi.<stack>.yaml (default: the project's root)"
        )
        return sub

    status = command("status", "latest runs per job: schedule time, status, result, attempt, duration")
    status.add_argument("--job", help="only this job (its name in the stack config)")
    status.add_argument("--limit", type=int, default=ledger_view.STATUS_RUNS, help="runs per job")
    status.add_argument("--until", help="latest schedule time to show (RFC 3339; default now)")

    audit = command("audit", "expected runs against the ledger; exit 1 when a run was missed")
    audit.add_argument("--job", help="only this job (its name in the stack config)")
    audit.add_argument("--since", help="first schedule time (RFC 3339; default now - retention)")
    audit.add_argument("--until", help="last schedule time (RFC 3339; default now)")

    for name, help_text in (
        ("backfill", "re-deliver one scheduled run with its original ScheduleTime"),
        ("redo", "delete a completed run's record, then re-deliver the run: it executes again"),
    ):
        back = command(name, help_text)
        back.add_argument("--job", required=True, help="the job's name in the stack config")
        back.add_argument("--at", required=True, help="the run's schedule time (RFC 3339)")
        back.add_argument("--url", help="the function URL (default: pulumi stack output functionUri)")
        back.add_argument("--invoker", help="account to mint the ID token as (default: the stack's invoker)")
        back.add_argument("--body", help="request body (JSON) instead of the job's configured body")

    smoke = command("smoke", "force-run a job, wait for its run to complete, check the TTL policy")
    smoke.add_argument(
        "--job",
        help="the job to force-run; it really runs (default: the stack's missed-run audit, which only reads)",
    )
    smoke.add_argument("--wait", type=float, default=DEFAULT_WAIT_SECONDS, help="seconds to wait for the run")
    smoke.add_argument("--scheduler-endpoint", help="Cloud Scheduler API endpoint (default: Google's)")
    smoke.add_argument("--firestore-admin-endpoint", help="Firestore admin API endpoint (default: Google's)")
    return parser


def run(argv: Sequence[str], out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    stdout = out or sys.stdout
    context = StackContext.load(args.stack, args.firestore_project, args.database, args.stacks_dir)
    if args.command == "status":
        until = parse_time(args.until, "--until") if args.until else None
        return ledger_view.status(context, stdout, job=args.job, limit=args.limit, until=until)
    if args.command == "audit":
        since = parse_time(args.since, "--since") if args.since else None
        until = parse_time(args.until, "--until") if args.until else None
        return ledger_view.audit(context, stdout, job=args.job, since=since, until=until)
    if args.command in ("backfill", "redo"):
        deliver = backfill if args.command == "backfill" else redo
        at = parse_time(args.at, "--at")
        return deliver(
            context, stdout, job=args.job, at=at, url=args.url, invoker=args.invoker, body=args.body
        )
    endpoints = Endpoints.from_env(args.scheduler_endpoint, args.firestore_admin_endpoint)
    return Smoke(context, stdout, endpoints, wait_seconds=args.wait).run(args.job)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except UserError as error:
        print(f"python -m ops: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except auth_exceptions.GoogleAuthError as error:
        print(
            f"python -m ops: no usable Google credentials ({error}); run "
            "`gcloud auth application-default login`, or set FIRESTORE_EMULATOR_HOST for a local ledger",
            file=sys.stderr,
        )
        return 1
    except google_exceptions.GoogleAPIError as error:
        print(f"python -m ops: a Google API call failed: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
