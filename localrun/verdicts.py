"""What each run came to, and what the demo's exit code says about all of them.

A run is judged from two sources that outlive every lost answer: the function's log lines
(one per delivery, written before the answer a fault may lose) say how often the job ran to
its end, and the run's ledger record says what that came to and, for a terminal failure,
why. The answers the scheduler saw are only the story of the run, never its verdict.

A job "ran to its end" on an attempt whose job returned (`job_returned: true`), and on an
attempt that failed terminally (`failed_terminal`: a TerminalJobError, a body the job
refused, a return value that cannot be stored): the ledger records either as the run's one
completion. An attempt whose job raised anything else released its claim for a retry and
does not count: its run executes on a later attempt, or never.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from exactly_once import log_fields
from exactly_once.delivery.scheduler_request import format_rfc3339
from localrun.delivery import Delivery, RunResult
from localrun.function_log import log_lines

FAILED_TERMINAL = "failed_terminal"  # the function's outcome for a terminal failure
TERMINAL_FAILURE = "terminal_failure"  # the ledger's result for one
IN_PROGRESS = "in_progress"  # the outcome of a delivery turned away by a live lease


class Verdict(enum.StrEnum):
    """What a run came to; the values are the report's."""

    SUCCEEDED = "succeeded"  # executed once, and the job succeeded
    FAILED = "failed_terminal"  # executed once, and the job failed terminally (recorded, not retried)
    NEVER = "never_executed"  # the job never ran to its end: every attempt failed or went unanswered
    DUPLICATE = "executed_more_than_once"  # the one thing exactly-once must never do

    @property
    def shown(self) -> str:
        return _SHOWN[self]


_SHOWN = {
    Verdict.SUCCEEDED: "once, succeeded",
    Verdict.FAILED: "once, failed terminally",
    Verdict.NEVER: "never executed",
    Verdict.DUPLICATE: "executed more than once",
}

# Exit codes of `make demo`: the worst verdict among the runs decides. A run that executed
# twice or never breaks what the demo shows; a run that executed once and failed terminally
# kept exactly-once but is no success of the job under test, so it is neither 0 nor 1.
EXIT_OK, EXIT_NOT_EXACTLY_ONCE, EXIT_CANNOT_RUN, EXIT_JOB_FAILED = 0, 1, 2, 3


def exit_code(verdicts: Sequence[Verdict]) -> int:
    if any(v in (Verdict.DUPLICATE, Verdict.NEVER) for v in verdicts):
        return EXIT_NOT_EXACTLY_ONCE
    if any(v is Verdict.FAILED for v in verdicts):
        return EXIT_JOB_FAILED
    return EXIT_OK


def ledger_records(db: firestore.Client, runs_collection: str, job_id: str) -> dict[str, dict[str, Any]]:
    """The job's run records by ScheduleTime (RFC 3339), as the ledger left them."""
    query = db.collection(runs_collection).where(filter=FieldFilter("job_name", "==", job_id))
    records: dict[str, dict[str, Any]] = {}
    for doc in query.stream():
        fields = doc.to_dict() or {}
        when = fields.get("schedule_time")
        records[format_rfc3339(when) if isinstance(when, datetime) else str(when)] = fields
    return records


def judge(
    results: Sequence[RunResult],
    log_path: Path | Mapping[str, Path],
    job_id: str,
    records: Mapping[str, Mapping[str, Any]],
) -> None:
    """Fill in each run's executions, verdict and reason, and each turned-away delivery's
    lease holder, from the function's log lines and the ledger's records. With one log per
    region (label -> log), each run also learns which regions' functions executed it."""
    logs = {"": log_path} if isinstance(log_path, Path) else log_path
    lines_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    region_of: dict[int, str] = {}
    for region, path in logs.items():
        for fields in log_lines(path):
            if fields.get(log_fields.JOB) == job_id:
                lines_of[str(fields.get(log_fields.SCHEDULE_TIME))].append(fields)
                region_of[id(fields)] = region
    for result in results:
        lines = lines_of.get(result.schedule_time, [])
        result.executions = sum(_ran_to_its_end(fields) for fields in lines)
        result.executed_in = [region_of[id(f)] for f in lines if _ran_to_its_end(f) and region_of[id(f)]]
        result.verdict, result.reason = _verdict(result, lines, records.get(result.schedule_time))
        _name_lease_holders(result.deliveries, lines)


def _ran_to_its_end(fields: Mapping[str, Any]) -> bool:
    return fields.get(log_fields.JOB_RETURNED) is True or fields.get(log_fields.OUTCOME) == FAILED_TERMINAL


def _verdict(
    result: RunResult, lines: Sequence[Mapping[str, Any]], record: Mapping[str, Any] | None
) -> tuple[Verdict, str]:
    if result.executions > 1:
        return Verdict.DUPLICATE, f"the job ran to its end {result.executions} times"
    if result.executions == 0:
        return Verdict.NEVER, _why_never(result, lines)
    if record is not None and record.get("result") == TERMINAL_FAILURE:
        return Verdict.FAILED, str(record.get("error") or "no reason recorded")
    ended = next(fields for fields in lines if _ran_to_its_end(fields))
    if ended.get(log_fields.OUTCOME) == FAILED_TERMINAL:
        # Recorded as the log says, but the record has gone (its retention ended): the log's
        # copy of the reason is all there is.
        return Verdict.FAILED, str(ended.get("error") or "no reason recorded")
    return Verdict.SUCCEEDED, ""


def _why_never(result: RunResult, lines: Sequence[Mapping[str, Any]]) -> str:
    """The last failure the function logged for the run (the job's exception, a store error),
    else the last answer the scheduler saw."""
    gave_up = "; the scheduler gave up" if result.retries_exhausted else ""
    failures = [fields for fields in lines if fields.get("error")]
    if failures:
        last = failures[-1]
        tries = sum(fields.get(log_fields.OUTCOME) == last.get(log_fields.OUTCOME) for fields in lines)
        return f"{last.get(log_fields.OUTCOME)} on {tries} attempt(s), last: {last['error']}{gave_up}"
    if result.deliveries:
        last_delivery = max(result.deliveries, key=lambda d: (d.sent_at_s, d.attempt, d.copy))
        answer = last_delivery.outcome
        if last_delivery.status is not None:
            answer = f"{last_delivery.status} {answer}"
        return f"no attempt ran the job to its end (last answer: {answer}){gave_up}"
    return f"never delivered{gave_up}"


def _name_lease_holders(deliveries: Sequence[Delivery], lines: Sequence[Mapping[str, Any]]) -> None:
    """A delivery turned away by a live lease (409 in_progress) learns whose lease it was from
    its own log line, found by the attempt id its answer carried."""
    holder_of = {
        str(fields.get("attempt_id")): str(fields.get("holder_attempt_id") or "")
        for fields in lines
        if fields.get(log_fields.OUTCOME) == IN_PROGRESS
    }
    for delivery in deliveries:
        if delivery.attempt_id in holder_of:
            delivery.lease_holder = holder_of[delivery.attempt_id]
