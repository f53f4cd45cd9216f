"""One delivery of a scheduled run: identify it, claim it, run the job, finish it, answer.

Finishing (the one write that ends a claimed attempt) is finishing.py's.

Kept free of Flask so the same code is driven by the Functions Framework in production and
by tests; decorator.py only adapts the request and response.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from google.api_core import exceptions as google_exceptions

from exactly_once import log_fields, strict_json, structured_log
from exactly_once.config import DEFAULT_POLICY, JobPolicy, OverlapPolicy, run_keys_of, zones_of
from exactly_once.context import JobHandler, Progress, RunContext, decode_checkpoint, encode_output
from exactly_once.delivery.endings import GiveBack, Ran, Skip
from exactly_once.delivery.failure_pause import FailurePauses
from exactly_once.delivery.finishing import RunFinisher
from exactly_once.delivery.forced_runs import DeliveredRun
from exactly_once.delivery.heartbeat import EndAttempt, LeaseKeeper, give_up_at
from exactly_once.delivery.outcomes import (
    ANSWERED_FIELDS,
    STATUS_AND_SEVERITY,
    WITH_OUTPUT,
    Answer,
    Outcome,
    Reply,
)
from exactly_once.delivery.overlap import JobBusy, JobLock, JobLocks
from exactly_once.delivery.report import DeliveryReport
from exactly_once.delivery.request_checks import body_problem, wants_fresh_answer
from exactly_once.delivery.scheduler_request import BadSchedulerRequest, run_key_from_headers
from exactly_once.delivery.trace_headers import trace_of
from exactly_once.delivery.warm_cache import CompletedRuns
from exactly_once.errors import TerminalJobError, error_text
from exactly_once.ledger.downstream import Downstream
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import (
    Claim,
    ClaimTooLate,
    JobResult,
    LeaseLost,
    RunAlreadyCompleted,
    RunInProgress,
    RunLedger,
    WrongTarget,
)
from exactly_once.run_key import RunKey
from exactly_once.run_writes import RunWrites, WriteScope

# A Scheduler job's body is a few hundred bytes of parameters; anything near this is not one.
# Checked before anything is read into memory or written.
MAX_BODY_BYTES = 64 * 1024

# What a duplicate of a completed run is answered, by the recorded result.
_DUPLICATE_OUTCOME = {
    JobResult.OVERLAP_SKIPPED.value: Outcome.OVERLAP_SKIPPED,
    JobResult.SKIPPED_LATE.value: Outcome.SKIPPED_LATE,
    JobResult.SKIPPED_PAUSED.value: Outcome.SKIPPED_PAUSED,
}


class ScheduledRunHandler:
    """Claim, run, finish, answer; plus the per-job overlap policy and the warm cache."""

    def __init__(
        self,
        ledger: RunLedger,
        job: JobHandler,
        *,
        new_attempt_id: Callable[[], str],
        time_limit_seconds: float,
        end_attempt: EndAttempt,
        jobs: Mapping[str, JobPolicy] | None = None,
        known_jobs: frozenset[str] | None = None,
        target: str = "",
        locks: JobLocks | None = None,
        cache: CompletedRuns | None = None,
        statuses: JobStatuses | None = None,
        log_stream: TextIO | None = None,
        write_scope: WriteScope | None = None,
        project: str | None = None,
    ) -> None:
        """`project` is the function's own, which names the request's trace in every log line.
        `write_scope` is the ledger's database and runs collection, which a job's
        context.writes are checked against (None: unchecked, for tests without one).
        `end_attempt` is what the watchdog calls to stop an attempt that overran its time
        limit or could not keep its lease: heartbeat.end_instance in a deployed function.
        `jobs` is the job table's policies by job name (a job it does not name has the
        defaults): a shorter time limit than `time_limit_seconds`, a starting deadline past
        which a run is skipped, an overlap policy, a run key of its own. `statuses`, when given,
        keeps each job's last result, written in the commit that ends each run, and serves
        RunContext.previous(). `known_jobs`, when given, is every job the table names: a
        delivery of any other is refused before anything is claimed."""
        self._ledger = ledger
        self._job = job
        self._new_attempt_id = new_attempt_id
        self._time_limit = time_limit_seconds
        self._jobs = dict(jobs or {})
        self._known_jobs = known_jobs
        self._target = target
        if any(policy.overlap is not OverlapPolicy.ALLOW for policy in self._jobs.values()) and locks is None:
            raise ValueError("an overlap policy needs JobLocks")
        self._locks = locks
        self._cache = cache if cache is not None else CompletedRuns()
        self._end_attempt = end_attempt
        self._statuses = statuses
        self._log_stream = log_stream
        self._write_scope = write_scope
        self._project = project
        self._run_keys = run_keys_of(self._jobs)
        self._zones = zones_of(self._jobs)
        self._finisher = RunFinisher(ledger, self._cache, statuses, log_stream)
        # Only when some job pauses after failures (its statuses say which): no other job reads more.
        self._pauses = (
            FailurePauses(statuses, ledger.deadline_seconds, log_stream)
            if statuses is not None and statuses.pause_after_failures
            else None
        )

    def handle(self, method: str, headers: Mapping[str, str], body: bytes | None) -> Reply:
        """Answer one delivery; `body` is None when it could not be read. Whatever goes
        wrong, the answer is JSON and logged."""
        started = time.monotonic()
        report = DeliveryReport()
        with structured_log.delivery_fields() as line_fields:
            if (trace := trace_of(headers)) is not None:
                line_fields.update(trace.log_fields(self._project))
            try:
                answer = self._deliver(method, headers, body, report, started=started)
            except Exception as error:  # a bug must still answer JSON and leave its log line
                report.error = error_text(repr(error))
                report.traceback = error_text(traceback.format_exc())
                answer = Answer(Outcome.INTERNAL_ERROR, "unexpected error")
            report.latency_ms = round((time.monotonic() - started) * 1000, 3)
            return self._reply(answer, report)

    def _reply(self, answer: Answer, report: DeliveryReport) -> Reply:
        """The log line and the answer, both rendered from the delivery's report."""
        outcome = answer.outcome
        status, severity = STATUS_AND_SEVERITY[outcome]
        fields = report.log_fields(outcome)
        message = answer.message
        if report.key is not None and report.key.forced:
            message = f"forced run (ahead of its ScheduleTime, an identity of its own): {message}"
        structured_log.emit(severity, f"{outcome.value}: {message}", fields, self._log_stream)
        reply_body: dict[str, Any] = {"outcome": outcome.value, "message": message}
        reply_body.update({k: fields[k] for k in ANSWERED_FIELDS if k in fields})
        if answer.error is not None:
            reply_body["error"] = answer.error
        if outcome in WITH_OUTPUT:
            output = answer.output_json
            reply_body["output"] = strict_json.loads(output) if output is not None else None
        return Reply(status, reply_body, answer.headers)

    def _deliver(
        self,
        method: str,
        headers: Mapping[str, str],
        body: bytes | None,
        report: DeliveryReport,
        *,
        started: float,
    ) -> Answer:
        if method != "POST":
            # Cloud Scheduler sends what the job says; the stack's jobs POST. Anything else
            # (a probe, a crawler, a misconfigured job) must not run the job.
            return Answer(
                Outcome.METHOD_NOT_ALLOWED, f"{method} does not run a job: use POST", {"Allow": "POST"}
            )
        if body is not None and len(body) > MAX_BODY_BYTES:
            return Answer(Outcome.BODY_TOO_LARGE, f"request body exceeds {MAX_BODY_BYTES} bytes")
        if (problem := body_problem(headers, body)) is not None:
            return Answer(Outcome.BAD_REQUEST, f"{problem}; nothing was claimed")
        assert body is not None
        try:
            delivered = run_key_from_headers(headers, self._run_keys)
        except BadSchedulerRequest as error:
            report.header = error.header
            return Answer(Outcome.BAD_REQUEST, str(error))
        key = delivered.at_first_occurrence(self._zones.get(delivered.job_name))
        if key != delivered:
            report.delivered_schedule_time = delivered.schedule_time
        if self._known_jobs is not None and key.job_name not in self._known_jobs:
            report.key = _labelled(key)
            return Answer(
                Outcome.UNKNOWN_JOB,
                f"the job table does not name job {key.job_name!r}: nothing claimed, not run (a renamed "
                "job's old Scheduler job, or a new one the function does not serve yet)",
            )
        run = DeliveredRun(key, self._ledger.clock())
        report.key = key = _labelled(run.key)
        fingerprint = hashlib.sha256(body).hexdigest()
        if wants_fresh_answer(headers):
            report.no_cache = True
        elif not run.guessed_forced and (seen := self._cache.get(key.run_id)) is not None:
            report.result, report.cached = seen.result, True
            _flag_other_body(report, seen.fingerprint.hex(), fingerprint)
            return self._duplicate(seen.result, seen.output_json, seen.error)
        report.attempt_id = attempt_id = self._new_attempt_id()

        try:
            try:
                claim = run.claim(
                    self._ledger,
                    attempt_id,
                    fingerprint=fingerprint,
                    target=self._target,
                    give_back=self._finisher.give_back,
                )
            finally:
                report.key = key = _labelled(run.key)  # settled on Firestore's clock, or as far as it got
        except RunAlreadyCompleted as done:
            report.result = done.result.value
            _flag_other_body(report, done.fingerprint, fingerprint)
            self._cache.remember(
                key.run_id,
                done.result.value,
                done.output_json,
                done.seconds_left,
                fingerprint=done.fingerprint,
                error=done.error,
            )
            return self._duplicate(done.result.value, done.output_json, done.error)
        except RunInProgress as busy:
            report.holder_attempt_id, report.retry_after_s = busy.holder, busy.retry_after_seconds
            _flag_other_body(report, busy.fingerprint, fingerprint)
            retry_after = {"Retry-After": str(busy.retry_after_seconds)}
            return Answer(Outcome.IN_PROGRESS, "another attempt holds the run's lease", retry_after)
        except WrongTarget as other:
            report.recorded_target, report.target = other.recorded, self._target
            return Answer(Outcome.WRONG_TARGET, str(other))
        except ClaimTooLate as late:
            report.error = str(late)
            return Answer(Outcome.STORE_ERROR, "Firestore answered the claim too late: job not started")
        except google_exceptions.GoogleAPIError as error:
            report.error = error_text(repr(error))
            return Answer(Outcome.STORE_ERROR, "could not claim the run: Firestore failed")
        report.claim = claim
        job_policy = self._jobs.get(key.job_name, DEFAULT_POLICY)
        if (skipped := _past_starting_deadline(claim, key, job_policy, report)) is not None:
            return self._finisher.end(key, claim, skipped, report)
        if (pauses := self._pauses) is not None and (
            held := self._finisher.decided(key, claim, lambda: pauses.decide(key, claim), report)
        ) is not None:
            return held
        time_limit = job_policy.time_limit_seconds or self._time_limit
        ends_at = started + time_limit
        if time.monotonic() >= ends_at:
            # The watchdog would end the instance as the job starts: give the claim back unrun.
            too_late = GiveBack(
                Outcome.STORE_ERROR,
                "Firestore answered the claim past the time limit: job not run",
                error=f"the claim took longer than the job's {time_limit:g}s time limit",
            )
            return self._finisher.end(key, claim, too_late, report)

        policy = job_policy.overlap
        if policy is OverlapPolicy.ALLOW:
            return self._run_and_finish(key, claim, body, report, ends_at)[0]
        report.overlap = policy
        return self._run_alone(key, claim, body, report, policy, ends_at)

    def _duplicate(self, result: str, output_json: str | None, error: str | None = None) -> Answer:
        outcome = _DUPLICATE_OUTCOME.get(result, Outcome.DUPLICATE_COMPLETED)
        if outcome is Outcome.OVERLAP_SKIPPED:
            return Answer(outcome, "skipped: another run of the job was running (overlap policy skip)")
        if outcome is Outcome.SKIPPED_LATE:
            return Answer(outcome, "skipped: delivered past the job's startingDeadlineSeconds", error=error)
        if outcome is Outcome.SKIPPED_PAUSED:
            return Answer(outcome, "skipped: the job was paused after failed runs in a row", error=error)
        if result == JobResult.TERMINAL_FAILURE:
            message = "duplicate of a run that failed terminally: job not run"
            return Answer(outcome, message, output_json=output_json, error=error)
        return Answer(outcome, "duplicate of a completed run: job not run", output_json=output_json)

    def _run_alone(
        self,
        key: RunKey,
        claim: Claim,
        body: bytes,
        report: DeliveryReport,
        policy: OverlapPolicy,
        ends_at: float,
    ) -> Answer:
        """Take the job's lock, or skip / wait as the policy says; release it afterwards."""
        assert self._locks is not None
        lock: JobLock | None = None
        try:
            try:
                lock = self._locks.acquire(key, claim)
            except JobBusy as busy:
                report.holder_run_id = busy.holder_run_id
                return self._finisher.end(key, claim, _overlapped(busy, policy, report), report)
            answer, started = self._run_and_finish(key, claim, body, report, ends_at)
            if answer.outcome in (Outcome.EXECUTED, Outcome.LEASE_TAKEN_OVER) and (
                started is not None and started.running
            ):
                # The run started work that is still running: the lock stays with the run
                # until a later run (or nobody) finds that work ended (JobLocks.acquire).
                lock = None
            return answer
        except (google_exceptions.GoogleAPIError, LeaseLost) as error:
            lock_failed = GiveBack(
                Outcome.STORE_ERROR,
                "could not take or settle the job's lock: Firestore failed",
                error=error_text(repr(error)),
            )
            return self._finisher.end(key, claim, lock_failed, report)
        finally:
            if lock is not None:
                with contextlib.suppress(google_exceptions.GoogleAPIError):
                    self._locks.release(lock)  # else it is free once the run's lease ends

    def _run_and_finish(
        self, key: RunKey, claim: Claim, body: bytes, report: DeliveryReport, ends_at: float
    ) -> tuple[Answer, Downstream | None]:
        """The answer, and the downstream work the job reported starting (what decides whether
        a `skip` or `wait` job's lock stays with the run)."""
        if self._ledger.monotonic() >= give_up_at(claim, self._ledger.lease.total_seconds()):
            # The checks since the claim (the job's status, its lock) were answered so late
            # that the lease may be over and the run another attempt's: never start it then.
            too_late = GiveBack(
                Outcome.STORE_ERROR,
                "Firestore answered the checks before the job past the lease's give-up point: job not run",
                error="the claim's lease was nearly over before the job could start",
            )
            return self._finisher.end(key, claim, too_late, report), None
        previous = None
        if (statuses := self._statuses) is not None:
            # Read only if the job asks, once however often it does.
            previous = functools.cache(
                lambda: statuses.last_success(key, timeout=self._ledger.deadline_seconds)
            )
        context = RunContext(
            run_id=claim.run_id,
            job_name=key.job_name,
            schedule_time=key.schedule_time,
            time_zone=self._jobs.get(key.job_name, DEFAULT_POLICY).time_zone or "UTC",
            forced=key.forced,
            claimed_at=claim.claimed_at,
            previous_reader=previous,
            project=key.project,
            location=key.location,
            attempt_id=claim.attempt_id,
            fence=claim.fence,
            body=body,
            ends_at=ends_at,
            last_checkpoint=decode_checkpoint(claim.checkpoint_json),
            progress=Progress(claim.checkpoint_json),
            writes=RunWrites(self._write_scope),
        )
        about = {
            log_fields.RUN_ID: key.run_id,
            log_fields.JOB: key.job_name,
            "attempt_id": claim.attempt_id,
            "fence": claim.fence,
        }
        keeper = LeaseKeeper(
            self._ledger,
            claim,
            ends_at=ends_at,
            end_attempt=self._end_attempt,
            about=about,
            log_stream=self._log_stream,
            checkpoint=context.progress.latest,
        )
        failure: BaseException | None = None
        output_json: str | None = None
        returned = False
        value: Any = None
        with keeper:
            try:
                value = self._job(context)
                returned = True
            except BaseException as error:  # sys.exit(), KeyboardInterrupt...: the job failed
                failure = error
        # Outside the watched block: the job has returned, and what its value costs to check
        # is bounded by the stored size, not by the value (context.encode_output).
        if returned:
            try:
                output_json = encode_output(value)
            except TerminalJobError as error:
                failure = error
        report.job_returned = returned
        report.renewals = keeper.renewals
        report.staged_writes = len(context.writes)
        answer = self._finisher.end(key, keeper.claim, Ran(context, output_json, failure), report)
        return answer, context.downstream.latest


def _past_starting_deadline(
    claim: Claim, key: RunKey, policy: JobPolicy, report: DeliveryReport
) -> Skip | None:
    """A run claimed later than its job's startingDeadlineSeconds after its ScheduleTime, on
    Firestore's clock (the claim's commit time less the ScheduleTime), is recorded skipped, never
    run: its time has passed for this job."""
    deadline = policy.starting_deadline_seconds
    late = (claim.update_time - key.schedule_time).total_seconds()
    if deadline is None or late <= deadline:
        return None
    report.late_by_s, report.starting_deadline_s = round(late, 3), deadline
    reason = (
        f"delivered {late:.3f}s after its ScheduleTime, past the job's startingDeadlineSeconds "
        f"({deadline:g}s): not run"
    )
    return Skip(JobResult.SKIPPED_LATE, reason, Outcome.SKIPPED_LATE, f"skipped: {reason}")


def _overlapped(busy: JobBusy, policy: OverlapPolicy, report: DeliveryReport) -> Skip | GiveBack:
    """Another run of the job holds its lock: `skip` records this run skipped, `wait` gives it
    back (nothing ran: the next delivery claims afresh, with the checkpoint the run holds)."""
    if policy is OverlapPolicy.SKIP:
        return Skip(
            JobResult.OVERLAP_SKIPPED,
            f"run {busy.holder_run_id} was running",
            Outcome.OVERLAP_SKIPPED,
            "skipped: another run of the job was running (overlap policy skip)",
            says_why=False,
        )
    report.retry_after_s = busy.retry_after_seconds
    return GiveBack(
        Outcome.OVERLAP_WAIT,
        "another run of the job is running (overlap policy wait): retry later",
        headers={"Retry-After": str(busy.retry_after_seconds)},
    )


def _flag_other_body(report: DeliveryReport, recorded: str, ours: str) -> None:
    """The same run delivered with other bytes than the ones that ran it: still answered from
    the record (the run happened), but never silently."""
    if recorded and recorded != ours:
        report.body_mismatch = True


def _labelled(key: RunKey) -> RunKey:
    """`key`, now the run every later line of this delivery names in its labels (the job's own
    lines among them), so that one filter finds a run across all its deliveries."""
    structured_log.set_delivery_field(log_fields.LABELS, {"run_id": key.run_id, "job": key.job_name})
    return key
