"""How an attempt that held the run's lease ends: the one write that records it, and the answer.

Every claimed attempt ends in exactly one such write, made as the owner of the run's latest
lease, from the ending the delivery came to (delivery/endings.py): completed (the job returned,
or failed for good, or was skipped), released (the job failed and a retry may run it), or given
back unrun. Whatever rides with the run rides in that write: the job's staged Firestore writes,
its downstream work, its last checkpoint, the job's last result (ledger/job_status.py). A
completed run is then remembered by the instance's warm cache, so its duplicates here are
answered without a read. This is the only module of the delivery that writes a run's end.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from google.api_core import exceptions as google_exceptions

from exactly_once.delivery.endings import DecidedOnStale, Ending, GiveBack, Ran, Skip
from exactly_once.delivery.following import log_failed
from exactly_once.delivery.outcomes import Answer, Outcome
from exactly_once.delivery.report import DeliveryReport
from exactly_once.delivery.warm_cache import CompletedRuns
from exactly_once.errors import TerminalJobError, error_text
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import Claim, ClaimKind, JobResult, LeaseLost, RunLedger
from exactly_once.ledger.records import WritesRefused
from exactly_once.ledger.writes import StagedWrite
from exactly_once.run_key import RunKey

# How often a run is decided again when the read a skip was decided on no longer stands when it
# commits (a failing run's retry ended, a resume, another run's skip). Each refusal means another
# write to what was read committed, so of N runs decided at once on the same document, one
# commits per round: N rounds settle them all.
DECIDE_TRIES = 10


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

    def end(self, key: RunKey, claim: Claim, ending: Ending, report: DeliveryReport) -> Answer:
        """Record how the attempt ended and answer for it. A skip whose conditioned write was
        refused raises DecidedOnStale, for the caller to decide the run again (`decided`)."""
        if isinstance(ending, GiveBack):
            if ending.error is not None:
                report.error = ending.error
            self.give_back(claim)
            return Answer(ending.outcome, ending.message, dict(ending.headers))
        if isinstance(ending, Skip):
            return self._skip(claim, ending, report)
        return self._ran(key, claim, ending, report)

    def decided(
        self, key: RunKey, claim: Claim, decide: Callable[[], Ending | None], report: DeliveryReport
    ) -> Answer | None:
        """End the attempt as `decide` says, deciding again while the read its skip stood on has
        changed by its commit; None when it decides the job runs."""
        for _ in range(DECIDE_TRIES):
            ending = decide()
            if ending is None:
                return None
            try:
                return self.end(key, claim, ending, report)
            except DecidedOnStale:
                continue
        changing = GiveBack(
            Outcome.STORE_ERROR, "what the run was decided on kept changing: given back unrun"
        )
        return self.end(key, claim, changing, report)

    def give_back(self, claim: Claim) -> None:
        """Return a claim unrun; should it fail, the run waits out its lease (nothing ran)."""
        with contextlib.suppress(google_exceptions.GoogleAPIError, LeaseLost):
            self._ledger.give_back(claim)

    def _skip(self, claim: Claim, skip: Skip, report: DeliveryReport) -> Answer:
        try:
            self._complete(claim, skip.result, skip.reason, None, skip.also)
        except WritesRefused:
            raise DecidedOnStale from None
        except LeaseLost:
            return Answer(Outcome.LEASE_LOST, "another attempt took the run over before it was skipped")
        except google_exceptions.GoogleAPIError as error:
            report.error = error_text(repr(error))
            return Answer(Outcome.STORE_ERROR, "could not record the run as skipped: Firestore failed")
        report.result = skip.result.value
        self.remember(claim, skip.result, None, error=skip.reason)
        if skip.committed is not None:
            skip.committed()
        return Answer(skip.outcome, skip.message, error=skip.reason if skip.says_why else None)

    def _ran(self, key: RunKey, claim: Claim, ran: Ran, report: DeliveryReport) -> Answer:
        """Record what the job came to. The job's staged writes ride in the completing commit
        of a job that returned, and only there: a failed job's are dropped (a retry stages its
        own). So does the downstream work a proxy job reported starting; a failed job's latest
        checkpoint rides in its release, for the retry to resume from."""
        statuses, context, failure, output_json = self._statuses, ran.context, ran.failure, ran.output_json
        checkpoint_json = context.progress.latest()
        writes = context.writes.staged()
        downstream = context.downstream.latest
        record_fields = downstream.fields() if downstream is not None else None
        report.downstream = downstream
        try:
            if isinstance(failure, TerminalJobError):
                why = "job failed terminally: recorded, will not be retried"
                return self._terminal(key, claim, error_text(failure), report, why)
            if failure is not None:
                trace = "".join(traceback.format_exception(failure))
                report.error = error = error_text(repr(failure))
                report.traceback = error_text(trace)
                also = [statuses.failed(key, claim.run_id, error)] if statuses else []
                self._ledger.release(claim, checkpoint_json=checkpoint_json, also=also)
                return Answer(Outcome.FAILED_RELEASED, "job failed: claim released for the next retry")
            try:
                success = [statuses.succeeded(key, claim.run_id, output_json)] if statuses else []
                self._complete(
                    claim, JobResult.SUCCEEDED, None, output_json, [*writes, *success], record_fields
                )
            except WritesRefused as refused:
                # Firestore refused one of the job's writes (a create of a document that
                # exists...): none applied, and a retry would stage the same ones.
                why = "a write staged in context.writes was refused: none applied, recorded failed"
                return self._terminal(key, claim, error_text(str(refused)), report, why)
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

    def _terminal(self, key: RunKey, claim: Claim, message: str, report: DeliveryReport, why: str) -> Answer:
        """Complete the run as failed for good, with the job's status, and answer so."""
        report.error = message
        also = [self._statuses.failed(key, claim.run_id, message)] if self._statuses else []
        self._complete(claim, JobResult.TERMINAL_FAILURE, message, None, also)
        self.remember(claim, JobResult.TERMINAL_FAILURE, None, error=message)
        return Answer(Outcome.FAILED_TERMINAL, why, error=message)

    def _complete(
        self,
        claim: Claim,
        result: JobResult,
        error: str | None,
        output_json: str | None,
        also: Sequence[StagedWrite],
        record_fields: Mapping[str, Any] | None = None,
    ) -> None:
        """The one completing write of the delivery, whatever ended the run."""
        self._ledger.complete(claim, result, error, output_json, also=also, record_fields=record_fields)

    def remember(
        self, claim: Claim, result: JobResult, output_json: str | None, *, error: str | None = None
    ) -> None:
        """The record expires retention after the owner's last write, at most a lease ago."""
        valid_for = (self._ledger.retention - self._ledger.lease).total_seconds()
        self._cache.remember(
            claim.run_id, result.value, output_json, valid_for, fingerprint=claim.fingerprint, error=error
        )
