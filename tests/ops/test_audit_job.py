"""The scheduled missed-run audit, run as the stack runs it (a job of the real handler), and
the stack's log-based metrics applied to the real log lines the function wrote."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import requests

from exactly_once import log_fields
from exactly_once.delivery.outcomes import Outcome
from infra.monitoring import log_filters
from infra.monitoring.alerts import ALERTS
from infra.plan.headers import delivery_headers
from infra.settings.jobs import AUDIT_JOB_NAME
from tests.ops.conftest import DevFunction, serve_dev_function

SERVICE = "eos-handler"


def _day_at(hour: int, minute: int) -> datetime:
    day = datetime.now(UTC).date() - timedelta(days=2)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _stamp(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _missed(lines, audit_run_id: str) -> set[tuple[str, str]]:
    return {
        (str(line[log_fields.JOB]), str(line[log_fields.SCHEDULE_TIME]))
        for line in lines
        if line.get(log_fields.EVENT) == log_fields.MISSED_RUN and line.get("audit_run_id") == audit_run_id
    }


def test_each_missed_run_is_reported_once_by_the_first_audit_after_its_window(
    dev_function: DevFunction,
) -> None:
    settings = dev_function.settings
    demo = dev_function.first_job
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    for minute in (0, 15, 45):
        assert dev_function.deliver(demo, _day_at(10, minute)).json()["outcome"] == "executed"

    first = dev_function.deliver(audit_job, _day_at(11, 5)).json()
    assert first["outcome"] == "executed"
    # Retry windows (800 s for every dev job) that closed in (10:05, 11:05]: the 10:00-10:45 demo
    # runs, the hourly workflow job's 10:30, the hourly BigQuery job's 10:45 and the audit's own
    # 10:05, which nobody delivered.
    assert _missed(dev_function.log_lines(), first["run_id"]) == {
        (settings.scheduler_job_id(demo), _stamp(_day_at(10, 30))),
        (settings.scheduler_job_id("workflow-proxy-demo"), _stamp(_day_at(10, 30))),
        (settings.scheduler_job_id("bigquery-demo"), _stamp(_day_at(10, 45))),
        (settings.scheduler_job_id(AUDIT_JOB_NAME), _stamp(_day_at(10, 5))),
    }

    # A redelivery of the same audit run is a duplicate: nothing is reported twice.
    lines_before = len(dev_function.log_lines())
    assert dev_function.deliver(audit_job, _day_at(11, 5)).json()["outcome"] == "duplicate_completed"
    new_lines = dev_function.log_lines()[lines_before:]
    assert [line.get(log_fields.EVENT) for line in new_lines] == [None]  # only the delivery's own line

    # The next audit judges the next hour only: 10:30 is not reported again, and the audit run
    # that did happen (11:05) is not missed.
    second = dev_function.deliver(audit_job, _day_at(12, 5)).json()
    assert second["outcome"] == "executed"
    assert _missed(dev_function.log_lines(), second["run_id"]) == {
        *((settings.scheduler_job_id(demo), _stamp(_day_at(11, minute))) for minute in (0, 15, 30, 45)),
        (settings.scheduler_job_id("workflow-proxy-demo"), _stamp(_day_at(11, 30))),
        (settings.scheduler_job_id("bigquery-demo"), _stamp(_day_at(11, 45))),
    }


def test_the_metrics_count_the_real_log_lines(dev_function: DevFunction) -> None:
    """Every delivery's line is counted once by outcome and job; the audit's lines count as
    missed runs, never as deliveries."""
    demo = dev_function.first_job
    audit_job = next(job for job in dev_function.settings.jobs if job.name == AUDIT_JOB_NAME)
    url = dev_function.server.url
    earlier = len(dev_function.log_lines())  # the server's start-up probe wrote one already

    def send(job, at: datetime, body: dict[str, object] | None = None) -> str:
        data = json.dumps(body).encode() if body is not None else job.body_bytes() or b""
        headers = delivery_headers(dev_function.settings, job, at)
        return str(requests.post(url, headers=headers, data=data, timeout=120).json()["outcome"])

    sent = [
        send(demo, _day_at(9, 0)),
        send(demo, _day_at(9, 0)),
        send(demo, _day_at(9, 15), {"sleep_seconds": -1}),
        send(demo, _day_at(9, 30), {"fail": True}),
        send(audit_job, _day_at(10, 5)),
    ]
    assert sent == ["executed", "duplicate_completed", "failed_terminal", "failed_released", "executed"]
    bad = requests.post(url, headers={}, data=b"", timeout=60)
    assert bad.status_code == 400

    entries = [log_filters.log_entry(line, SERVICE) for line in dev_function.log_lines()[earlier:]]
    deliveries = Counter(
        tuple(log_filters.DELIVERIES.labels_of(entry).values())
        for entry in entries
        if log_filters.DELIVERIES.matches(entry, SERVICE)
    )
    assert deliveries == Counter(
        {
            ("executed", dev_function.settings.scheduler_job_id(demo)): 1,
            ("duplicate_completed", dev_function.settings.scheduler_job_id(demo)): 1,
            ("failed_terminal", dev_function.settings.scheduler_job_id(demo)): 1,
            ("failed_released", dev_function.settings.scheduler_job_id(demo)): 1,
            ("executed", dev_function.settings.scheduler_job_id(AUDIT_JOB_NAME)): 1,
            ("bad_request", ""): 1,
        }
    )
    latencies = [
        entry["jsonPayload"][log_fields.LATENCY_MS]
        for entry in entries
        if log_filters.LATENCY.matches(entry, SERVICE)
    ]
    assert len(latencies) == 6 and all(isinstance(ms, int | float) and ms >= 0 for ms in latencies)
    missed = Counter(
        log_filters.MISSED_RUNS.labels_of(entry)["job"]
        for entry in entries
        if log_filters.MISSED_RUNS.matches(entry, SERVICE)
    )
    # (09:05, 10:05]: demo 09:00 completed, 09:15 completed (terminally), 09:30 released and never
    # retried here, 09:45 never delivered; the workflow job's 09:30; the BigQuery job's 09:45;
    # the audit's own 09:05.
    deployed = dev_function.settings.scheduler_job_id
    assert missed == Counter(
        {
            deployed(demo): 2,
            deployed("workflow-proxy-demo"): 1,
            deployed("bigquery-demo"): 1,
            deployed(AUDIT_JOB_NAME): 1,
        }
    )
    # Another service's lines are not this stack's.
    assert not any(log_filters.DELIVERIES.matches(entry, "other-service") for entry in entries)


def test_a_run_another_function_recorded_is_refused_alerted_and_reported_missed(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    """Two functions share the runs collection and the job names: the other one ran the demo's
    10:30 run. The stack refuses it on every delivery, and its audit reports the run missed,
    naming the other target, although the record says completed."""
    stack = serve_dev_function(function_servers, dev_settings, emulator_host, project, db, log_path, SERVICE)
    other = serve_dev_function(
        function_servers, dev_settings, emulator_host, project, db, log_path, "crm-handler"
    )
    demo = stack.first_job
    audit_job = next(job for job in dev_settings.jobs if job.name == AUDIT_JOB_NAME)
    taken = _day_at(10, 30)
    assert other.deliver(demo, taken).json()["outcome"] == "executed"
    earlier = len(stack.log_lines())
    for _ in range(2):  # a delivery and its retry
        refused = stack.deliver(demo, taken)
        assert (refused.status_code, refused.json()["outcome"]) == (409, "wrong_target")
    for minute in (0, 15, 45):
        assert stack.deliver(demo, _day_at(10, minute)).json()["outcome"] == "executed"
    assert len(stack.executions(demo)) == 4  # 10:30 once, by the other function

    audit = stack.deliver(audit_job, _day_at(11, 5)).json()
    assert audit["outcome"] == "executed"
    lines = [line for line in stack.log_lines() if line.get("audit_run_id") == audit["run_id"]]
    deployed = dev_settings.scheduler_job_id
    assert _missed(lines, audit["run_id"]) == {
        (deployed(demo), _stamp(taken)),
        (deployed("workflow-proxy-demo"), _stamp(_day_at(10, 30))),
        (deployed("bigquery-demo"), _stamp(_day_at(10, 45))),
        (deployed(AUDIT_JOB_NAME), _stamp(_day_at(10, 5))),
    }
    other_target = "crm-handler"
    (line,) = [line for line in lines if line.get("recorded_target")]
    assert (line[log_fields.JOB], line["recorded_target"]) == (deployed(demo), other_target)
    assert f"recorded by target {other_target}, not this stack's {SERVICE}:" in str(line["message"])

    # The refusals are what the wrong_target alert counts: one series, two deliveries.
    (alert,) = [alert for alert in ALERTS if alert.outcome is Outcome.WRONG_TARGET]
    entries = [log_filters.log_entry(line, SERVICE) for line in stack.log_lines()[earlier:]]
    watched = Counter(
        alert.metric.labels_of(entry)["job"]
        for entry in entries
        if alert.metric.matches(entry, SERVICE)
        and all(alert.metric.labels_of(entry)[k] == v for k, v in alert.label_filter.items())
    )
    assert watched == Counter({deployed(demo): 2})
