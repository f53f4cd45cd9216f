"""How an attempt that held the run's lease ends: the one write that records it, and the answer.

Every claimed attempt ends in exactly one such write, made as the owner of the run's latest
lease: completed (the job returned, or failed for good, or was skipped as too late), or released
(the job failed and a retry may run it). Whatever rides with the run rides in that write: the
job's staged Firestore writes, its downstream work, its last checkpoint, the job's last result
(ledger/job_status.py). A completed run is then remembered by the instance's warm cache, so its
duplicates here are answered without a read.
"""

from __future__ import annotations

import traceback
from typing import TextIO

from google.api_core import exceptions as google_exceptions

from exactly_once.context import RunContext
from exactly_once.delivery.following import log_failed
from exactly_once.delivery.outcomes import Answer, Outcome
from exactly_once.delivery.report import DeliveryReport
from exactly_once.delivery.warm_cache import CompletedRuns
from exactly_once.errors import TerminalJobError, error_text
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import Claim, ClaimKind, JobResult, LeaseLost, RunLedger
from exactly_once.ledger.records import WritesRefused
from exactly_once.run_key import RunKey


class RunFinisher:
    """Records how an attempt ended and answers for it; shared by every delivery of a handler."""

    def __init__(
        self,
        ledger: RunLedger,
        cache: CompletedRuns,
        statuses: JobStatuses | None,
        log_stream: TextIO | None,
    ) -> None:
        self._ledger = ledger
        self._cache = cache
        self._statuses = statuses
        self._log_stream = log_stream

    def finish(
        self,
        key: RunKey,
        claim: Claim,
        output_json: str | None,
        failure: BaseException | None,
        report: DeliveryReport,
        context: RunContext,
    ) -> Answer:
        """Record what the job came to. The job's staged writes ride in the completing commit
        of a job that returned, and only there: a failed job's are dropped (a retry stages its
        own). So does the downstream work a proxy job reported starting; a failed job's latest
        checkpoint rides in its release, for the retry to resume from."""
        statuses = self._statuses
        checkpoint_json = context.progress.latest()
        writes = context.writes.staged()
        downstream = context.downstream.latest
        record_fields = downstream.fields() if downstream is not None else None
        report.downstream = downstream
        try:
            if isinstance(failure, TerminalJobError):
                why = "job failed terminally: recorded, will not be retried"
                return self.record_terminal(key, claim, error_text(failure), report, why)
            if failure is not None:
                trace = "".join(traceback.format_exception(failure))
                report.error = error = error_text(repr(failure))
                report.traceback = error_text(trace)
                also = [statuses.failed(key, claim.run_id, error)] if statuses else []
                self._ledger.release(claim, checkpoint_json=checkpoint_json, also=also)
                return Answer(Outcome.FAILED_RELEASED, "job failed: claim released for the next retry")
            try:
                success = [statuses.succeeded(key, claim.run_id, output_json)] if statuses else []
                self._ledger.complete(
                    claim, output_json=output_json, also=[*writes, *success], record_fields=record_fields
                )
            except WritesRefused as refused:
                # Firestore refused one of the job's writes (a create of a document that
                # exists...): none applied, and a retry would stage the same ones.
                why = "a write staged in context.writes was refused: none applied, recorded failed"
                return self.record_terminal(key, claim, error_text(str(refused)), report, why)
        except LeaseLost:
            return Answer(
                Outcome.LEASE_LOST,
                "another attempt took the run over while this one ran: this instance was stalled "
                "for longer than the lease",
            )
        except google_exceptions.GoogleAPIError as error:
            report.error = error_text(repr(error))
            return Answer(Outcome.STORE_ERROR, "could not record the run's end: Firestore failed")
        self.remember(claim, JobResult.SUCCEEDED, output_json)
        if downstream is not None and downstream.state.failed:
            stored = {"job_name": context.job_name, "schedule_time": context.schedule_time}
            log_failed(stored, claim.run_id, downstream, seen_by="proxy", log_stream=self._log_stream)
        if claim.kind is ClaimKind.TOOK_OVER_LEASE:
            return Answer(
                Outcome.LEASE_TAKEN_OVER,
                "took over an expired lease and ran the job",
                output_json=output_json,
            )
        return Answer(Outcome.EXECUTED, "job ran", output_json=output_json)

    def skip_late(self, claim: Claim, late: float, deadline: float, report: DeliveryReport) -> Answer:
        """Record the run as skipped, never run: its time has passed for this job (lateness is
        the claim's commit time, Firestore's clock, less the ScheduleTime). The completing write
        is the delivery's second, as a run's would be."""
        reason = (
            f"delivered {late:.3f}s after its ScheduleTime, past the job's startingDeadlineSeconds "
            f"({deadline:g}s): not run"
        )
        report.late_by_s, report.starting_deadline_s = round(late, 3), deadline
        try:
            self._ledger.complete(claim, JobResult.SKIPPED_LATE, reason)
        except LeaseLost:
            return Answer(Outcome.LEASE_LOST, "another attempt took the run over before it was skipped")
        except google_exceptions.GoogleAPIError as error:
            report.error = error_text(repr(error))
            return Answer(Outcome.STORE_ERROR, "could not record the late run as skipped: Firestore failed")
        report.result = JobResult.SKIPPED_LATE.value
        self.remember(claim, JobResult.SKIPPED_LATE, None, error=reason)
        return Answer(Outcome.SKIPPED_LATE, f"skipped: {reason}", error=reason)

    def record_terminal(
        self, key: RunKey, claim: Claim, message: str, report: DeliveryReport, why: str
    ) -> Answer:
        """Complete the run as failed for good, with the job's status, and answer so."""
        report.error = message
        also = [self._statuses.failed(key, claim.run_id, message)] if self._statuses else []
        self._ledger.complete(claim, JobResult.TERMINAL_FAILURE, message, also=also)
        self.remember(claim, JobResult.TERMINAL_FAILURE, None, error=message)
        return Answer(Outcome.FAILED_TERMINAL, why, error=message)

    def remember(
        self, claim: Claim, result: JobResult, output_json: str | None, *, error: str | None = None
    ) -> None:
        """The record expires retention after the owner's last write, at most a lease ago."""
        valid_for = (self._ledger.retention - self._ledger.lease).total_seconds()
        self._cache.remember(
            claim.run_id, result.value, output_json, valid_for, fingerprint=claim.fingerprint, error=error
        )
