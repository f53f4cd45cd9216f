"""`ops resume`: end the pause of a job that failed `pauseAfterFailures` runs in a row.

The function keeps the job's failing runs in its status document and skips the job's runs
while there are that many (function/exactly_once/delivery/failure_pause.py). Resuming forgets
them, in one merge of that document, so the next run executes and as many failures again pause
the job again. The Cloud Scheduler job was never paused, so there is nothing to change in it or
in the stack's config.
"""

from __future__ import annotations

from typing import TextIO

from exactly_once.delivery.scheduler_request import format_rfc3339
from exactly_once.ledger.job_status import JobStatuses, resume_fields
from exactly_once.ledger.lifecycle import StoredRecord, job_state
from exactly_once.ledger.lifecycle.job_state import JobStatus
from exactly_once.ledger.store import FirestoreRunStore
from ops.context import StackContext, UserError
from ops.exit_codes import ExitCode


def failure_pause_note(status: JobStatus, limit: int, job: str) -> str:
    """How far the job is from its pause, or since when and after which runs it is paused: its
    state as the lifecycle decides it (ledger/lifecycle/job_state.py)."""
    pause = job_state.pause_of(status, limit)
    if pause is None:
        return f"failed runs in a row {len(status.failed_runs)} of pauseAfterFailures {limit}"
    when = f"since {format_rfc3339(pause.since)}" if pause.since is not None else "from its next run"
    return (
        f"PAUSED after failures {when}, after runs {', '.join(pause.after)} (pauseAfterFailures {limit}): "
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
    statuses = JobStatuses(
        FirestoreRunStore(context.firestore(), context.settings.runs_collection),
        context.settings.runs_collection,
    )
    # The status document is the run key's: a job renamed with its runKey kept is resumed there.
    document = statuses.document_of(context.project, context.location, context.settings.run_key_id(settings))
    before = document.get()
    status = (
        JobStatus.of(StoredRecord(before.to_dict() or {}, before.update_time, before.read_time))
        if before.exists
        else JobStatus()
    )
    note = failure_pause_note(status, settings.pause_after_failures, job)
    document.set(resume_fields(), merge=True)
    out.write(f"job {job} resumed (was: {note}); its next run executes\n")
    return ExitCode.OK
