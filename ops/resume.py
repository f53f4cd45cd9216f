"""`ops resume`: end the pause of a job that failed `pauseAfterFailures` runs in a row.

The function keeps the job's failing runs in its status document and skips the job's runs
while there are that many (function/exactly_once/delivery/failure_pause.py). Resuming forgets
them, in one merge of that document, so the next run executes and as many failures again pause
the job again. The Cloud Scheduler job was never paused, so there is nothing to change in it or
in the stack's config.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TextIO

from exactly_once.delivery.scheduler_request import format_rfc3339
from exactly_once.ledger.fields import FAILED_RUNS, FAILURE_PAUSED_AFTER, FAILURE_PAUSED_AT
from exactly_once.ledger.job_status import JobStatuses, resume_fields
from ops.context import StackContext, UserError
from ops.exit_codes import ExitCode


def failure_pause_note(recorded: Mapping[str, Any], limit: int, job: str) -> str:
    """How far the job is from its pause, or since when and after which runs it is paused."""
    failed = recorded.get(FAILED_RUNS)
    failed_runs = [str(run_id) for run_id in failed] if isinstance(failed, list) else []
    if len(failed_runs) < limit:
        return f"failed runs in a row {len(failed_runs)} of pauseAfterFailures {limit}"
    since = recorded.get(FAILURE_PAUSED_AT)
    when = f"since {format_rfc3339(since)}" if isinstance(since, datetime) else "from its next run"
    after = recorded.get(FAILURE_PAUSED_AFTER)
    runs = [str(run_id) for run_id in after] if isinstance(after, list) and after else failed_runs
    return (
        f"PAUSED after failures {when}, after runs {', '.join(runs)} (pauseAfterFailures {limit}): "
        f"its runs are skipped until `ops resume --job {job}`, a forced run or a retry succeeds"
    )


def resume(context: StackContext, out: TextIO, *, job: str) -> ExitCode:
    """Forget the job's failing runs: its next run executes."""
    settings = context.job(job)
    if settings.pause_after_failures is None:
        raise UserError(
            f"job {job!r} has no pauseAfterFailures: failures never pause it (a job paused with "
            "`paused: true` is resumed by setting it false and `pulumi up`)"
        )
    statuses = JobStatuses(context.firestore(), context.settings.runs_collection)
    # The status document is the run key's: a job renamed with its runKey kept is resumed there.
    document = statuses.document_of(context.project, context.location, context.settings.run_key_id(settings))
    before = document.get()
    recorded = (before.to_dict() or {}) if before.exists else {}
    note = failure_pause_note(recorded, settings.pause_after_failures, job)
    document.set(resume_fields(), merge=True)
    out.write(f"job {job} resumed (was: {note}); its next run executes\n")
    return ExitCode.OK
