"""A job paused after failing runs in a row (jobs[].pauseAfterFailures): its next runs are
recorded skipped instead of run, until a run succeeds or an operator resumes it.

A job that keeps failing (a downstream gone, a credential revoked) otherwise fails every run and
every retry, each one an ERROR line, an alert and a load on whatever it calls. Its status
document (ledger/job_status.py) keeps the ids of the runs that failed since its last success,
in the same commits that end them, so a delivery learns with one read whether the job is paused.

What is and is not held back:

- A run of a paused job is claimed and completed `skipped_paused` (200, so Cloud Scheduler does
  not retry it), never run; the missed-run audit counts it completed, not missed: the ledger
  decided it on purpose.
- A failing run's own retries still run: the pause holds back the runs after them, and a retry
  that succeeds ends the pause. Skipping them would record a failed run as completed.
- A forced run (`ops run-now`) always runs: an operator's deliberate try, whose success ends the
  pause like any other.
- The Cloud Scheduler job is never paused, so `pulumi up` never finds it changed behind its
  back. That is what tells this pause from the stack's own `paused` key (audit/pauses.py), which
  pauses the Scheduler job: its runs are never delivered and leave no record.

Whether a run is held back is the job's state (ledger/lifecycle/job_state.py), read once; the skip's
commit carries an update of the status conditioned on that read, so a success or a resume that
committed first refuses the skip, and the run is decided again. The skip that finds the job
`pausing` records the pause in that same commit, and the delivery that knows the commit is its
own, answered or read back, writes the one ERROR line the stack's alert counts. `ops resume`
forgets the failing runs (ledger/job_status.resume_fields), so the next run executes and as many
failures again pause the job again.
"""

from __future__ import annotations

from typing import Any, TextIO

from google.api_core import exceptions as google_exceptions

from exactly_once import log_fields, structured_log
from exactly_once.delivery.endings import GiveBack, Skip
from exactly_once.delivery.outcomes import Outcome
from exactly_once.errors import error_text
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.lifecycle import JobResult, job_state
from exactly_once.ledger.protocol import Claim
from exactly_once.run_key import RunKey


class FailurePauses:
    """The pause check of the jobs with pauseAfterFailures, which `statuses` names (it keeps
    their failing runs)."""

    def __init__(
        self, statuses: JobStatuses, deadline_seconds: float, log_stream: TextIO | None = None
    ) -> None:
        self._statuses = statuses
        self._limits = statuses.pause_after_failures
        self._deadline_seconds = deadline_seconds
        self._log_stream = log_stream

    def decide(self, key: RunKey, claim: Claim) -> Skip | GiveBack | None:
        """How a claimed run its paused job must not run ends, or None to run it, from one read
        of the job's status (none for a job without pauseAfterFailures). The skip's commit
        carries the status's write conditioned on that read: refused, the run is decided again
        (RunFinisher.decided)."""
        limit = self._limits.get(key.job_name)
        if limit is None or key.forced:
            return None
        try:
            status = self._statuses.read(key, timeout=self._deadline_seconds)
        except google_exceptions.GoogleAPIError as error:
            # Unknown whether the job is paused: give the run back for the next retry to decide.
            message = "could not read whether the job is paused: Firestore failed; run given back unrun"
            return GiveBack(Outcome.STORE_ERROR, message, error=error_text(repr(error)))
        skip = job_state.holds_back(status, limit, claim.run_id)
        if skip is None:
            return None
        reason = (
            f"the job is paused after {len(status.failed_runs)} failed runs in a row (pauseAfterFailures "
            f"{limit}: {', '.join(status.failed_runs)}): not run; a success of a failing run's retry, a "
            "forced run or `ops resume` ends the pause"
        )
        return Skip(
            JobResult.SKIPPED_PAUSED,
            reason,
            Outcome.SKIPPED_PAUSED,
            f"skipped: {reason}",
            also=[self._statuses.skipped(key, claim.run_id, status, skip)],
            committed=(lambda: self._announce(key, claim, skip, limit)) if skip.announces else None,
        )

    def _announce(self, key: RunKey, claim: Claim, skip: job_state.Skip, limit: int) -> None:
        """The one ERROR line of a pause: written by the delivery whose skip recorded it."""
        failed = list(skip.failed_runs)
        fields: dict[str, Any] = {
            log_fields.EVENT: log_fields.JOB_PAUSED_AFTER_FAILURES,
            log_fields.JOB: key.job_name,
            log_fields.FAILED_RUNS: failed,
            "pause_after_failures": limit,
            "first_skipped_run_id": claim.run_id,
        }
        message = (
            f"job {key.job_name} paused after {len(failed)} failed runs in a row (pauseAfterFailures "
            f"{limit}): its runs are skipped until a run succeeds or `ops resume`"
        )
        structured_log.emit("ERROR", message, fields, self._log_stream)
