"""`backfill --since T --until T [--only-missed]`: the runs of a time range delivered again by
the machinery the stack's audit catches up with (exactly_once/audit/redelivery.py), never by a
request from this machine to the function.

For a deployed stack each run becomes a Cloud Tasks task on the stack's catch-up queue: Cloud
Tasks delivers it from inside Google's network, which the function's internal-only ingress
admits, signed as the invoker account. The queue exists when a job of the stack has a
`catchup` key. A local stack (a loopback `--url`) is posted to directly, as its audit does.
Every delivery carries the run's original schedule time, so the ledger runs each run once:
a run that completed meanwhile is answered as a duplicate.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import datetime, timedelta
from typing import TextIO

from exactly_once.audit.config import AuditError, Redelivery
from exactly_once.audit.missed_runs import judge_runs
from exactly_once.audit.redelivery import RedeliveryError, sender_for
from exactly_once.audit.schedule import fires
from exactly_once.delivery.scheduler_request import format_rfc3339
from exactly_once.loopback import is_loopback_http_url
from infra.plan.catchup import catches_up, catchup_delivery, redelivery
from ops.context import StackContext, UserError, utc_now
from ops.delivery import stack_output
from ops.exit_codes import ExitCode
from ops.ledger_view import stack_target_until


def backfill_range(
    context: StackContext,
    out: TextIO,
    *,
    job: str,
    since: datetime,
    until: datetime,
    only_missed: bool = False,
    url: str | None = None,
    invoker: str | None = None,
    queue: str | None = None,
    now: datetime | None = None,
) -> ExitCode:
    """Hand every run of `job` scheduled in [since, until] to the catch-up machinery (with
    `only_missed`, only the missed runs a delivery would claim: no record, released, or
    lapsed, their retries over); one line per
    run. OK when every one was handed over, CLOUD_UNREACHABLE at the first that was not."""
    now = now or utc_now()
    if until > now:
        raise UserError(f"--until {format_rfc3339(until)} is in the future: its runs are Cloud Scheduler's")
    settings = context.job(job)
    audited = dataclasses.replace(
        context.audited(settings), delivery=catchup_delivery(context.settings, settings)
    )
    try:
        runs = judge_runs(
            [(audited, fire) for fire in fires(audited.schedule, audited.time_zone, since, until)],
            project=context.project,
            location=context.location,
            now=now,
            read_records=context.run_records(),
            lease=timedelta(seconds=context.settings.lease_seconds),
            target=stack_target_until(context, now),
        )
    except AuditError as error:
        raise UserError(str(error)) from None
    chosen = [run for run in runs if run.deliverable] if only_missed else runs
    send = sender_for(_redelivery(context, url, invoker, queue), os.environ)
    what = "missed runs" if only_missed else "runs"
    out.write(
        f"backfill of {job} from {format_rfc3339(since)} to {format_rfc3339(until)}: {len(chosen)} of "
        f"{len(runs)} scheduled {what} to deliver\n"
    )
    for run in runs:
        stamp = format_rfc3339(run.schedule_time)
        if run not in chosen:
            out.write(f"{stamp}  {job}  not delivered: {run.state.value} ({run.detail or 'recorded'})\n")
            continue
        try:
            via = send(audited, run.schedule_time)
        except RedeliveryError as error:
            out.write(f"{stamp}  {job}  not handed over: {error}; nothing later was sent\n")
            return ExitCode.CLOUD_UNREACHABLE
        out.write(f"{stamp}  {job}  delivered: {via}\n")
    return ExitCode.OK


def _redelivery(context: StackContext, url: str | None, invoker: str | None, queue: str | None) -> Redelivery:
    """A loopback `url`: a local stack, posted to directly. Otherwise the stack's queue, whose
    name only the deployed stack knows (it ends in when the queue was created)."""
    if url is not None and is_loopback_http_url(url):
        return Redelivery(url=url)
    if not catches_up(context.settings):
        raise UserError(
            f"stack {context.stack!r} deploys no catch-up queue: give a job a `catchup` key and run "
            "`pulumi up`, or deliver single runs with `backfill --at` from inside the project's network"
        )
    email = invoker or stack_output(context.stack, "invokerServiceAccount", "--invoker")
    path = queue or stack_output(context.stack, "catchupQueue", "--queue")
    resend = redelivery(context.settings, email, path)
    return dataclasses.replace(resend, url=url) if url is not None else resend
