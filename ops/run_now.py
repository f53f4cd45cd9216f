"""`run-now --stack S --job NAME`: a manual run of a job, with an identity of its own.

The run is started the way the console's "force run" starts it: Cloud Scheduler's RunJob,
through the official client, so the delivery comes from inside Google's network with the
job's own headers, body and OIDC token, which the function's internal-only ingress admits.
Cloud Scheduler gives a forced delivery the *next* scheduled run's time; the function tells
it from that scheduled run because it arrives before that time (docs/operations.md, "Forced
runs"), records it as a run of its own, and the scheduled run at that time still runs.

`run-now` then waits for that manual run's record to complete and prints it. A manual run's
record is found by its job name (an equality, which needs no composite index) and told from
the job's scheduled runs by the trigger the function recorded with it (`forced`). A RunJob
sent within FORCED_RUN_TOLERANCE of the next scheduled time reaches the function as that
scheduled run, which runs once whichever of its deliveries comes first: run-now then waits
for that run's record, and says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.scheduler_v1 import CloudSchedulerClient

from exactly_once.delivery.forced_runs import FORCED_RUN_TOLERANCE
from exactly_once.delivery.scheduler_request import Trigger, format_rfc3339
from exactly_once.ledger import lifecycle
from exactly_once.ledger.fields import CLAIMED_AT, SCHEDULE_TIME, TRIGGER
from ops.context import CloudUnreachable, StackContext, utc_now
from ops.exit_codes import ExitCode
from ops.google_apis import (
    API_TIMEOUT_SECONDS,
    NO_CREDENTIALS,
    SCHEDULER_API,
    UNREACHABLE,
    Endpoints,
    caller_refused,
    client_options,
    likely_fix,
)

DEFAULT_WAIT_SECONDS = 180.0
POLL_SECONDS = 2.0
# This machine's clock and Firestore's may differ a little: records claimed up to this long
# before the request was sent still count as the request's.
CLOCK_SLACK_SECONDS = 5.0
# What run-now says of a RunJob taken as the scheduled run it came just before.
SCHEDULED_INSTEAD = (
    f"it reached the function within {FORCED_RUN_TOLERANCE.total_seconds():g}s of the next scheduled "
    "time, so it is that scheduled run, which runs once; scheduled run completed"
)
# The job name field of a run record, which the query filters on.
JOB_NAME_FIELD = "job_name"


class RunJobRefused(Exception):
    """Cloud Scheduler refused RunJob; `unreachable` when the caller could not ask at all."""

    def __init__(self, message: str, *, unreachable: bool) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def is_manual(record: Mapping[str, Any]) -> bool:
    """A forced (manual) run's record: the function records it with trigger `forced`, having
    judged on Firestore's clock that it came ahead of the schedule time it carries (the one
    rule, exactly_once.delivery.forced_runs); a scheduled run's record says `scheduled`."""
    return record.get(TRIGGER) == Trigger.FORCED and isinstance(record.get(CLAIMED_AT), datetime)


def requested_runs(records: Iterable[Mapping[str, Any]], since: datetime) -> list[dict[str, Any]]:
    """The runs a RunJob sent at `since` may have come to, oldest claim first: the manual runs
    claimed since then; or, while there is none, the scheduled runs claimed since then for a
    time not before it, which is what a RunJob sent within FORCED_RUN_TOLERANCE of the next
    scheduled time is taken for (a retry of an earlier run is for an earlier time)."""
    claimed = [dict(r) for r in records if isinstance(r.get(CLAIMED_AT), datetime) and r[CLAIMED_AT] >= since]
    found = [r for r in claimed if is_manual(r)] or [
        r for r in claimed if isinstance(r.get(SCHEDULE_TIME), datetime) and r[SCHEDULE_TIME] >= since
    ]
    return sorted(found, key=lambda record: record[CLAIMED_AT])


def manual_runs(context: StackContext, job_id: str, since: datetime) -> list[dict[str, Any]]:
    """requested_runs of the deployed job `job_id`, read from its ledger."""
    collection = context.firestore().collection(context.settings.runs_collection)
    query = collection.where(filter=FieldFilter(JOB_NAME_FIELD, "==", job_id))
    return requested_runs((doc.to_dict() or {} for doc in query.stream(timeout=API_TIMEOUT_SECONDS)), since)


@dataclass
class RunNow:
    """Start one manual run of a job and wait for its record."""

    context: StackContext
    endpoints: Endpoints
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    clock: Callable[[], datetime] = utc_now

    def start(self, job_id: str) -> datetime:
        """RunJob; returns the moment from which the manual run's claim is looked for."""
        since = self.clock() - timedelta(seconds=CLOCK_SLACK_SECONDS)
        name = CloudSchedulerClient.job_path(self.context.project, self.context.location, job_id)
        try:
            scheduler = CloudSchedulerClient(**client_options(self.endpoints.scheduler))
            scheduler.run_job(name=name, timeout=API_TIMEOUT_SECONDS)
        except auth_exceptions.DefaultCredentialsError as error:
            raise RunJobRefused(NO_CREDENTIALS.format(error=error), unreachable=True) from None
        except api_exceptions.GoogleAPICallError as error:
            raise RunJobRefused(likely_fix(SCHEDULER_API, error), unreachable=caller_refused(error)) from None
        except UNREACHABLE as error:
            raise RunJobRefused(f"cannot reach the Cloud Scheduler API: {error}", unreachable=True) from None
        return since

    def wait(self, job_id: str, since: datetime) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the completed manual run, None) once one is; (None, the latest seen or None) when
        none completed within the wait."""
        deadline = time.monotonic() + self.wait_seconds
        latest: dict[str, Any] | None = None
        while True:
            runs = manual_runs(self.context, job_id, since)
            latest = runs[-1] if runs else latest
            done = next((run for run in runs if lifecycle.result_of(run) is not None), None)
            if done is not None:
                return done, None
            if time.monotonic() >= deadline:
                return None, latest
            time.sleep(POLL_SECONDS)


def describe(record: Mapping[str, Any]) -> str:
    """One line about a manual run's record."""
    parts = [f"status {lifecycle.stored_status(record)}"]
    if record.get("result"):
        parts.append(f"result {record['result']}")
    parts.append(f"attempt {record.get('attempt_id')}")
    if isinstance(record.get(SCHEDULE_TIME), datetime):
        parts.append(f"announced schedule time {format_rfc3339(record[SCHEDULE_TIME])}")
    if record.get("error"):
        parts.append(f"error {record['error']!r}")
    if record.get("output_json"):
        parts.append(f"output {json.dumps(json.loads(record['output_json']), sort_keys=True)}")
    return ", ".join(parts)


def run_now(
    context: StackContext, out: TextIO, endpoints: Endpoints, job: str, wait_seconds: float
) -> ExitCode:
    """OK when the manual run completed without a terminal failure; RUN_PROBLEM when it failed,
    or no record completed within the wait; CLOUD_UNREACHABLE when RunJob could not be asked."""
    settings = context.job(job)
    job_id = context.settings.scheduler_job_id(settings)
    runner = RunNow(context, endpoints, wait_seconds)
    try:
        since = runner.start(job_id)
    except RunJobRefused as error:
        if error.unreachable:
            raise CloudUnreachable(f"run-now of {job}: {error}") from None
        out.write(f"run-now of {job}: Cloud Scheduler refused RunJob: {error}\n")
        return ExitCode.RUN_PROBLEM
    out.write(f"run-now of {job}: Cloud Scheduler job {job_id} forced; waiting up to {wait_seconds:g}s\n")
    done, latest = runner.wait(job_id, since)
    if done is not None:
        what = "manual run completed" if is_manual(done) else SCHEDULED_INSTEAD
        out.write(f"run-now of {job}: {what}: {describe(done)}\n")
        return ExitCode.RUN_PROBLEM if done.get("result") == "terminal_failure" else ExitCode.OK
    if latest is None:
        out.write(
            f"run-now of {job}: no manual run recorded within {wait_seconds:g}s: the delivery never reached "
            "the function (`gcloud scheduler jobs describe` shows the last attempt's status)\n"
        )
    else:
        out.write(
            f"run-now of {job}: manual run not completed within {wait_seconds:g}s: {describe(latest)}\n"
        )
    return ExitCode.RUN_PROBLEM
