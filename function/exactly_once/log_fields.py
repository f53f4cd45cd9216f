"""Names of the fields in the function's structured log lines.

Cloud Run turns each JSON line on stdout into a log entry whose `jsonPayload` carries these
fields. The stack's log-based metrics and alerts filter and group on them, so the writers and
the filters import the names from here: renaming a field here renames it on both sides.
"""

from __future__ import annotations

from typing import Final

# Read by Cloud Logging itself: the entry's severity and its one-line summary.
SEVERITY: Final = "severity"
MESSAGE: Final = "message"

# One line per delivery of a scheduled run (delivery/handler.py).
OUTCOME: Final = "outcome"
JOB: Final = "job"
RUN_ID: Final = "run_id"
SCHEDULE_TIME: Final = "schedule_time"
# Which run the delivery is: "scheduled", or "forced" for a run forced ahead of the
# ScheduleTime it carries (delivery/forced_runs.py).
TRIGGER: Final = "trigger"
LATENCY_MS: Final = "latency_ms"
# Present when the delivery ran the job: true when the job returned, false when it raised.
# `job_returned: true` beside a store_error, lease_lost or internal_error outcome marks a job
# that ran but whose run was not recorded completed by it: another attempt runs the job again.
JOB_RETURNED: Final = "job_returned"

# Lines that are about runs rather than deliveries (the missed-run audit) carry an event name
# instead of an outcome, so they never count as deliveries.
EVENT: Final = "event"
MISSED_RUN: Final = "missed_run"
AUDIT_SUMMARY: Final = "missed_run_audit"
# A proxy run's downstream work (a Cloud Run job execution, a Workflows execution, a BigQuery
# job) ended failed or cancelled (delivery/following.py); its fields are the run record's
# downstream_* fields, the API's error among them.
DOWNSTREAM_FAILED: Final = "downstream_failed"
# The audit job's summary of the runs whose downstream work it followed (audit/downstream.py).
DOWNSTREAM_AUDIT: Final = "downstream_audit"
# The audit delivered a missed run again (its job's `catchup` policy).
CATCHUP_DELIVERY: Final = "catchup_delivery"
# The audit could not judge one job (a schedule that never fires, an unknown zone): the other
# jobs are judged all the same; this job's runs wait for the next audit that can.
AUDIT_JOB_ERROR: Final = "audit_job_error"
# A job with pauseAfterFailures was found paused after that many failed runs in a row: one
# line per pause, whichever delivery found it first (delivery/failure_pause.py); FAILED_RUNS
# names the runs.
JOB_PAUSED_AFTER_FAILURES: Final = "job_paused_after_failures"
FAILED_RUNS: Final = "failed_runs"
# The watchdog ended an attempt's instance (delivery/heartbeat.py); CAUSE says why, in a word.
ATTEMPT_ENDED: Final = "attempt_ended"
CAUSE: Final = "cause"

# Read by Cloud Logging from a line's top level (not kept in jsonPayload): the request's trace
# and span (delivery/trace_headers.py), whether it was sampled, and the entry's labels, which
# carry the run and the job on every line written while a delivery runs (structured_log.py).
TRACE: Final = "logging.googleapis.com/trace"
SPAN_ID: Final = "logging.googleapis.com/spanId"
TRACE_SAMPLED: Final = "logging.googleapis.com/trace_sampled"
LABELS: Final = "logging.googleapis.com/labels"
