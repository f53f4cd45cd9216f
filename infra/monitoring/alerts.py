"""The alert policies, as data: one entry per outcome that needs a person, one per log-based
metric that does.

An outcome alert is keyed by the handler's own `Outcome`, so the outcome is spelt once (in
function/exactly_once/delivery/outcomes.py): the policy's series filter, its resource name,
its title, the dashboard's failures chart and the docs' alerts table all come from the key.
Adding an alert on an outcome is one entry in `OUTCOME_ALERTS`.

Pulumi-free, so the docs generator and the tests read it without the Pulumi engine;
infra/monitoring/operations.py turns each entry into a policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exactly_once import log_fields
from exactly_once.delivery.outcomes import Outcome
from infra.monitoring import log_filters
from infra.monitoring.log_filters import LogMetric

# Cloud Monitoring's type of a user-defined log-based metric is this plus the metric's id.
METRIC_TYPE_PREFIX = "logging.googleapis.com/user/"
# How long an incident stays open once its condition stops being met: every policy closes its
# incidents after this. A log-based counter writes no point while nothing is logged, so without
# it an incident would stay open for Cloud Monitoring's 7-day default and hide the next one of
# the same job (one incident per job and policy). 30 minutes is the shortest Cloud Monitoring
# accepts.
INCIDENT_AUTO_CLOSE_SECONDS = 1800


@dataclass(frozen=True)
class Alert:
    """What an alert tells the on-call, and when it fires (the count of its series in
    `window_seconds`, per job, above `threshold`)."""

    summary: str
    meaning: str
    runbook: str
    severity: str = "ERROR"
    threshold: float = 0
    window_seconds: int = 300


@dataclass(frozen=True)
class AlertSpec:
    """One alert policy as deployed: an `Alert` and the series it watches, which is either
    one outcome of the deliveries metric or every point of a metric."""

    key: str  # the policy's resource name is "<prefix>-alert-<key>"
    name: str  # how its title and the docs call it
    metric: LogMetric
    outcome: Outcome | None
    alert: Alert

    @property
    def title(self) -> str:
        return f"{self.name}: {self.alert.summary}"

    @property
    def label_filter(self) -> dict[str, str]:
        """The metric labels the policy's series must carry."""
        return {log_fields.OUTCOME: self.outcome.value} if self.outcome is not None else {}


# The outcomes that need a person. The order is the failures chart's too.
OUTCOME_ALERTS: Mapping[Outcome, Alert] = {
    Outcome.LEASE_LOST: Alert(
        summary="a run was taken over while its job was still running",
        meaning="An attempt's lease ended while its job ran, another attempt took the run over, and the "
        "job may have run twice: the instance stalled (frozen, or cut off from Firestore) for longer than "
        "a lease without its watchdog ending it.",
        runbook="Look for the instance's attempt_ended lines and Firestore errors around the run id; check "
        "the job's downstream effects for the run id and fence in the log line; a longer leaseSeconds "
        "tolerates longer stalls.",
    ),
    Outcome.STORE_ERROR: Alert(
        summary="the function could not read or write the run ledger",
        meaning="Firestore failed or timed out; deliveries are answered 500 and Cloud Scheduler retries "
        "them. A claim that failed ran nothing, and its retries run the job once Firestore answers; a "
        "completing write is tried until the run's lease ends (docs/timing.md), and one Firestore did not "
        "take by then leaves the run to the first retry after the lease, which runs the job again. "
        "A running job's lease renewals (one write every third of a "
        "lease: every 10 s by default) fail too, and its instance is ended after five sixths of a lease "
        "without one (attempt ended, renewal_failed). Runs are missed once the retries run out.",
        runbook="Check the Firestore status page and the database's quotas; check that the runtime "
        "service account still holds roles/datastore.user on the ledger database. Once it recovers, "
        "run `python -m ops audit` and backfill what it reports missed.",
    ),
    Outcome.FAILED_TERMINAL: Alert(
        summary="a job failed in a way retrying cannot fix",
        severity="WARNING",
        meaning="The job raised a terminal error (bad body, a 4xx from downstream). The run is recorded "
        "as completed with the error and will not be retried.",
        runbook="Read the log line's `error`; fix the job's body or the downstream call. To run it again "
        "after the fix: `python -m ops redo --stack <stack> --job <job> --at <schedule time>` (deletes the "
        "run's record, then delivers the run). Not for a BigQuery job BigQuery ran and failed "
        "(invalidQuery): its job id comes from the run id, so the redo finds the same failed job; fix the "
        "query in the stack config for the next runs and run this run's query by hand. Nor for a "
        "cloudRunJob run whose execution started: the redo finds it by RUN_ID and starts nothing.",
    ),
    Outcome.FAILED_RELEASED: Alert(
        summary="a job keeps failing and being retried",
        severity="WARNING",
        threshold=2,
        window_seconds=900,
        meaning="A job raised a retryable error three or more times in 15 minutes. Each failure released "
        "the run for Cloud Scheduler's next retry; when the retries run out the run is missed.",
        runbook="Read the log lines' `error` and `traceback` for the job; fix the cause (often a "
        "downstream outage). If retries ran out, `python -m ops audit` lists the run and "
        "`python -m ops backfill` re-delivers it.",
    ),
    Outcome.INTERNAL_ERROR: Alert(
        summary="the function failed unexpectedly",
        meaning="An unexpected error in the function itself (a bug, not the job and not Firestore): the deli"
        "very was answered 500 with a JSON body and Cloud Scheduler retries it. An error between the claim "
        "and the completing write leaves the run's lease in place, so the first retry after the lease "
        "ends takes the run over and runs the job, also when it had already returned "
        "(`job_returned: true`): then the job runs twice.",
        runbook="Read the log line's `error` and `traceback` and fix the code. With `job_returned: true`, "
        "check the job's downstream effects for the run id: unless its completing write went through, the "
        "retry that took the run over ran the job again. Once the retries are over, `python -m ops audit` "
        "lists the runs they did not complete.",
    ),
    Outcome.WRONG_TARGET: Alert(
        summary="a run is recorded by another function",
        meaning="The run's record was written by another function (the line's `recorded_target`; this "
        "one's is `target`): two deployments share a runs collection and a job name. The delivery was "
        "refused (409) and the job did not run here; every retry is refused the same way, and once they "
        "run out the missed-run audit reports the run missed, recorded by the other target.",
        runbook="Find the deployment `recorded_target` names, give one of the two functions a "
        "runsCollection of its own, and `pulumi up`. If this stack moved, `python -m ops audit` lists the "
        "refused runs as missed and `python -m ops backfill` runs them; if the other one moved, its records "
        "stay in this collection, and `python -m ops redo` (deletes the record, then delivers) runs each "
        "refused run this stack's job must still run.",
    ),
}

# The metrics every point of which needs a person: (metric, how the alert is called, alert).
METRIC_ALERTS: tuple[tuple[LogMetric, str, Alert], ...] = (
    (
        log_filters.MISSED_RUNS,
        "missed run",
        Alert(
            summary="a scheduled run never completed",
            severity="CRITICAL",
            window_seconds=3600,
            meaning="The hourly missed-run audit found a run whose retry window has closed without a "
            "completed record, or one recorded by another target (the line's `recorded_target`): this "
            "stack's job never ran it (or never finished). Cloud Scheduler will not try again.",
            runbook="Run `python -m ops audit --stack <stack> --job <job>` to list the runs, find why in "
            "the function's logs for that schedule time (auth, ingress, store_error, failures; a run "
            "recorded by another target: see wrong_target), fix it, then "
            "`python -m ops backfill --stack <stack> --job <job> --at <schedule time>` each missed run.",
        ),
    ),
    (
        log_filters.ENDED_ATTEMPTS,
        "attempt ended",
        Alert(
            summary="a job overran its time limit or lost touch with the ledger",
            window_seconds=900,
            meaning="The function ended an instance so that no retry would run a job alongside it: the job "
            "ran past its time limit (cause time_limit), or the instance could not renew the run's lease "
            "(renewal_failed) or found it taken over (taken_over). Unless taken over already, the run stays "
            "blocked until one lease (leaseSeconds, 30 s by default) after the attempt's last renewal or "
            "its claim; a running job renews every third of a lease, so with the defaults that is 20 to "
            "30 s after an instance ended at its time limit and about 5 s after one ended for "
            "renewal_failed. The next Cloud Scheduler retry after that takes the run over.",
            runbook="time_limit: make the job stop in time (check run.seconds_left() between steps) or "
            "raise functionTimeoutSeconds and the job's attemptDeadlineSeconds; renewal_failed: look for "
            "Firestore errors and latency around the run id; in every case check the job's downstream "
            "effects for the run id, since its last step may have been cut off.",
        ),
    ),
    (
        log_filters.DOWNSTREAM_FAILURES,
        "downstream failed",
        Alert(
            summary="the work a proxy run started failed",
            window_seconds=3600,
            meaning="A cloudRunJob, workflow or bigquery run completed when its execution started, and the "
            "execution then failed or was cancelled (the line's `downstream_name`, `downstream_state` and "
            "`downstream_error`, the API's own words). The ledger records the run completed, so Cloud "
            "Scheduler does not retry it; the line comes from the proxy itself, from the next run of a "
            "skip or wait job, or from the hourly audit job, whichever first saw the execution end.",
            runbook="Read the execution's own logs (`downstream_name`) and fix the cause. A workflow runs "
            "again with `python -m ops redo --stack <stack> --job <job> --at <schedule time>` (a new "
            "execution, same run id). A Cloud Run job execution or a BigQuery job is found again by its run "
            "id, so redo would report the same failed one: start the work by hand (`gcloud run jobs "
            "execute`, `bq query`). `python -m ops status --job <job>` shows each run's downstream state.",
        ),
    ),
)

# Declared only by a stack some job of which sets pauseAfterFailures (log_filters.PAUSE_METRICS).
PAUSE_METRIC_ALERTS: tuple[tuple[LogMetric, str, Alert], ...] = (
    (
        log_filters.FAILURE_PAUSES,
        "job paused after failures",
        Alert(
            summary="a job failed so many runs in a row that its runs are now skipped",
            window_seconds=3600,
            meaning="A job with pauseAfterFailures failed that many runs in a row (the line's "
            "`failed_runs`), so the function now records its runs `skipped_paused` without running "
            "them and answers 200; the Cloud Scheduler job itself is not paused. One line per pause: the "
            "alert fires once, however many runs are skipped. A failing run's retries still run, and a "
            "success of one ends the pause.",
            runbook="Read the failed runs' `error` lines (`python -m ops status --stack <stack> --job "
            "<job>` names them), fix the cause, then `python -m ops resume --stack <stack> --job <job>` "
            "(the next run executes) or try it at once with `python -m ops run-now`. The runs skipped "
            "meanwhile are recorded; `python -m ops redo` runs one of them again.",
        ),
    ),
)

ALERTS: tuple[AlertSpec, ...] = (
    *(
        AlertSpec(
            key=outcome.value, name=outcome.value, metric=log_filters.DELIVERIES, outcome=outcome, alert=alert
        )
        for outcome, alert in OUTCOME_ALERTS.items()
    ),
    *(
        AlertSpec(key=metric.suffix, name=name, metric=metric, outcome=None, alert=alert)
        for metric, name, alert in METRIC_ALERTS
    ),
)


PAUSE_ALERTS: tuple[AlertSpec, ...] = tuple(
    AlertSpec(key=metric.suffix, name=name, metric=metric, outcome=None, alert=alert)
    for metric, name, alert in PAUSE_METRIC_ALERTS
)


def declared_alerts(*, failure_pauses: bool) -> tuple[AlertSpec, ...]:
    """The alert policies a stack declares: `failure_pauses` when some job sets pauseAfterFailures."""
    return ALERTS + PAUSE_ALERTS if failure_pauses else ALERTS


def alert_filter(metric_name: str, alert: AlertSpec) -> str:
    """The Cloud Monitoring filter of `alert`'s time series, on the metric with id `metric_name`."""
    clauses = [
        f'metric.type="{METRIC_TYPE_PREFIX}{metric_name}"',
        f'resource.type="{log_filters.RESOURCE_TYPE}"',
    ]
    clauses += [f'metric.label.{label}="{value}"' for label, value in alert.label_filter.items()]
    return " AND ".join(clauses)


def fires_when(alert: Alert) -> str:
    """When the policy opens an incident, in the words of the docs' alerts table."""
    minutes = alert.window_seconds / 60
    window = f"{minutes / 60:g} h" if minutes % 60 == 0 else f"{minutes:g} min"
    if alert.threshold == 0:
        return f"any, in {window}"
    return f"more than {alert.threshold:g} for one job in {window}"
