"""The scheduled missed-run audit, run as the stack runs it (a job of the real handler), and
the stack's log-based metrics applied to the real log lines the function wrote.

An audit served through the function judges up to its claim's commit time: now. The tests
that judge yesterday's hours run the audit job's code in this process with a horizon of their
own (tests/support/audits.py), on the ledger the served function wrote; those that serve it
assert on the span the served audit says it judged."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import requests

from exactly_once import log_fields
from exactly_once.audit.config import AuditConfig
from exactly_once.audit.schedule import fire_times
from exactly_once.delivery.outcomes import Outcome
from exactly_once.delivery.scheduler_request import format_rfc3339
from infra.monitoring import log_filters
from infra.monitoring.alerts import ALERTS
from infra.plan.audit_job import audit_config
from infra.plan.headers import delivery_headers
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.stack import StackSettings
from tests.ops.conftest import DevFunction, serve_dev_function
from tests.support.audits import audited, judged_span, latest_fire, stack_audit, windows_closed_in
from tests.support.clock import SESSION_DAY
from tests.support.stacks import kind_sample_minutes

SERVICE = "eos-handler"
# The emulator's clock is this machine's: a commit time read back lies within this of the
# moments a test took around the request.
CLOCK_SLACK = timedelta(seconds=2)


def _day_at(hour: int, minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=2)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _stamp(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _missed(lines, audit_run_id: str) -> set[tuple[str, str]]:
    return {
        (str(line[log_fields.JOB]), str(line[log_fields.SCHEDULE_TIME]))
        for line in lines
        if line.get(log_fields.EVENT) == log_fields.MISSED_RUN and line.get("audit_run_id") == audit_run_id
    }


def _config(settings: StackSettings) -> AuditConfig:
    """The audit configuration the served function reads from its job table."""
    return audit_config(settings)


def _quiet_audit_time(settings: StackSettings, now: datetime) -> datetime:
    """A past ScheduleTime for a served audit run whose own retry window closed hours before
    any span an audit judges now, so no audit judges it while it runs."""
    audit = audited(_config(settings), settings.scheduler_job_id(AUDIT_JOB_NAME))
    return latest_fire(audit, now) - timedelta(hours=3)


def test_each_missed_run_is_reported_once_by_the_first_audit_after_its_window(
    dev_function: DevFunction,
) -> None:
    settings = dev_function.settings
    demo = dev_function.demo
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    deployed = settings.scheduler_job_id
    samples = kind_sample_minutes(settings)
    for minute in (0, 15, 45):
        assert dev_function.deliver(demo, _day_at(10, minute)).json()["outcome"] == "executed"
    audits = stack_audit(settings, dev_function.db)

    first = audits.run(_day_at(11, 5))  # the stack's first audit: it looks one interval back
    assert (first.output["judged_from"], first.output["judged_until"]) == (
        _stamp(_day_at(10, 5)),
        _stamp(_day_at(11, 5)),
    )
    # Retry windows (915 s for every dev job) that closed in (10:05, 11:05]: the 10:00-10:45 demo
    # runs, each hourly kind sample's run (the workflow job's 10:30, the BigQuery job's 10:45)
    # and the audit's own 10:05, which nobody delivered.
    assert first.missed() == {
        (deployed(demo), _stamp(_day_at(10, 30))),
        *((deployed(name), _stamp(_day_at(10, minute))) for name, minute in samples.items()),
        (deployed(AUDIT_JOB_NAME), _stamp(_day_at(10, 5))),
    }
    assert (first.output["judged"], first.output["missed"]) == (5 + len(samples), 2 + len(samples))

    # The 11:05 audit run completes as the function runs it (what it judged, up to now, is not
    # looked at here): its record is what the next audit judges it by.
    assert dev_function.deliver(audit_job, _day_at(11, 5)).json()["outcome"] == "executed"

    # The next audit continues from where the first stopped and judges that hour only: 10:30 is
    # not reported again, and the audit run that did happen (11:05) is not missed.
    second = audits.run(_day_at(12, 5), previous=first)
    assert second.output["judged_from"] == first.output["judged_until"]
    assert second.missed() == {
        *((deployed(demo), _stamp(_day_at(11, minute))) for minute in (0, 15, 30, 45)),
        *((deployed(name), _stamp(_day_at(11, minute))) for name, minute in samples.items()),
    }

    # Two audit runs were lost (12:05 and 13:05): the next that completes judges both hours,
    # each run once, the lost audit runs among them.
    third = audits.run(_day_at(14, 5), previous=second)
    assert (third.output["judged_from"], third.output["judged_until"]) == (
        _stamp(_day_at(12, 5)),
        _stamp(_day_at(14, 5)),
    )
    assert third.missed() == {
        *((deployed(demo), _stamp(_day_at(hour, minute))) for hour in (12, 13) for minute in (0, 15, 30, 45)),
        *(
            (deployed(name), _stamp(_day_at(hour, minute)))
            for name, minute in samples.items()
            for hour in (12, 13)
        ),
        *((deployed(AUDIT_JOB_NAME), _stamp(_day_at(hour, 5))) for hour in (12, 13)),
    }
    assert not third.missed() & (first.missed() | second.missed())


def test_a_served_audit_judges_up_to_its_claim_once_however_often_it_is_delivered(
    dev_function: DevFunction,
) -> None:
    """Served, the audit's horizon is its claim's commit time, whatever ScheduleTime it
    carries; a redelivery is a duplicate that reports nothing again; and the next audit run
    continues from where the last completed one stopped (read from the job's status)."""
    settings = dev_function.settings
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    config = _config(settings)
    before = datetime.now(UTC)
    scheduled = _quiet_audit_time(settings, before)
    first = dev_function.deliver(audit_job, scheduled).json()
    after = datetime.now(UTC)
    assert first["outcome"] == "executed"
    since, until = judged_span(first["output"])
    assert before - CLOCK_SLACK <= until <= after + CLOCK_SLACK  # now, not hours ago
    assert until - since == timedelta(seconds=config.interval_seconds)  # a first audit
    # Nothing ran in that hour: every run whose retry window closed in it is missed, once.
    expected = windows_closed_in(config.jobs, since, until)
    assert expected  # the demo job alone runs four times an hour
    assert _missed(dev_function.log_lines(), first["run_id"]) == expected
    assert first["output"]["missed"] == len(expected)

    # A redelivery of the same audit run is a duplicate: nothing is reported twice.
    lines_before = len(dev_function.log_lines())
    assert dev_function.deliver(audit_job, scheduled).json()["outcome"] == "duplicate_completed"
    new_lines = dev_function.log_lines()[lines_before:]
    assert [line.get(log_fields.EVENT) for line in new_lines] == [None]  # only the delivery's own line

    # The next audit run starts where the first stopped (however long ago its ScheduleTime).
    second = dev_function.deliver(audit_job, scheduled + timedelta(hours=1)).json()
    assert second["outcome"] == "executed"
    assert second["output"]["judged_from"] == first["output"]["judged_until"]
    later_since, later_until = judged_span(second["output"])
    missed_again = _missed(dev_function.log_lines(), second["run_id"])
    assert missed_again == windows_closed_in(config.jobs, later_since, later_until)
    assert not missed_again & expected


def test_the_metrics_count_the_real_log_lines(dev_function: DevFunction) -> None:
    """Every delivery's line is counted once by outcome and job; the audit's lines count as
    missed runs, never as deliveries."""
    demo = dev_function.demo
    audit_job = next(job for job in dev_function.settings.jobs if job.name == AUDIT_JOB_NAME)
    url = dev_function.server.url
    earlier = len(dev_function.log_lines())  # the server's start-up probe wrote one already

    def send(job, at: datetime, body: dict[str, object] | None = None) -> requests.Response:
        data = json.dumps(body).encode() if body is not None else job.body_bytes() or b""
        headers = delivery_headers(dev_function.settings, job, at)
        return requests.post(url, headers=headers, data=data, timeout=120)

    sent = [
        send(demo, _day_at(9, 0)),
        send(demo, _day_at(9, 0)),
        send(demo, _day_at(9, 15), {"sleep_seconds": -1}),
        send(demo, _day_at(9, 30), {"fail": True}),
        send(audit_job, _day_at(10, 5)),
    ]
    outcomes = [str(response.json()["outcome"]) for response in sent]
    assert outcomes == ["executed", "duplicate_completed", "failed_terminal", "failed_released", "executed"]
    bad = requests.post(url, headers={}, data=b"", timeout=60)
    assert bad.status_code == 400

    entries = [log_filters.log_entry(line, SERVICE) for line in dev_function.log_lines()[earlier:]]
    deliveries = Counter(
        tuple(log_filters.DELIVERIES.labels_of(entry).values())
        for entry in entries
        if log_filters.DELIVERIES.matches(entry, SERVICE)
    )
    deployed = dev_function.settings.scheduler_job_id
    assert deliveries == Counter(
        {
            ("executed", deployed(demo)): 1,
            ("duplicate_completed", deployed(demo)): 1,
            ("failed_terminal", deployed(demo)): 1,
            ("failed_released", deployed(demo)): 1,
            ("executed", deployed(AUDIT_JOB_NAME)): 1,
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
    # The audit judged the hour up to its claim (now), whatever its ScheduleTime: nothing was
    # delivered in it, so each run whose retry window closed in it is one missed-run line.
    since, until = judged_span(sent[-1].json()["output"])
    in_span = windows_closed_in(_config(dev_function.settings).jobs, since, until)
    assert missed == Counter(job for job, _ in in_span)
    assert missed[deployed(demo)] == 4  # every 15 minutes
    # Another service's lines are not this stack's.
    assert not any(log_filters.DELIVERIES.matches(entry, "other-service") for entry in entries)


def test_a_run_another_function_recorded_is_refused_alerted_and_reported_missed(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    """Two functions share the runs collection and the job names: the other one ran one of the
    demo's runs. The stack refuses it on every delivery, and its audit reports the run missed,
    naming the other target, although the record says completed. The audit is served: it learns
    the stack's target from its own run's record."""
    stack = serve_dev_function(function_servers, dev_settings, emulator_host, project, db, log_path, SERVICE)
    other = serve_dev_function(
        function_servers, dev_settings, emulator_host, project, db, log_path, "crm-handler"
    )
    demo = stack.demo
    audit_job = next(job for job in dev_settings.jobs if job.name == AUDIT_JOB_NAME)
    deployed = dev_settings.scheduler_job_id
    config = _config(dev_settings)
    window = timedelta(seconds=audited(config, deployed(demo)).retry_window_seconds)
    now = datetime.now(UTC)
    # The demo's runs whose retry window closed in the last 50 minutes: the audit about to run
    # judges them all (its span is the hour up to its claim).
    recent = fire_times(demo.schedule, demo.time_zone, now - timedelta(minutes=50) - window, now - window)
    taken, *ours = recent
    assert other.deliver(demo, taken).json()["outcome"] == "executed"
    earlier = len(stack.log_lines())
    for _ in range(2):  # a delivery and its retry
        refused = stack.deliver(demo, taken)
        assert (refused.status_code, refused.json()["outcome"]) == (409, "wrong_target")
    for instant in ours:
        assert stack.deliver(demo, instant).json()["outcome"] == "executed"
    assert len(stack.executions(demo)) == len(recent)  # `taken` once, by the other function

    audit = stack.deliver(audit_job, _quiet_audit_time(dev_settings, now)).json()
    assert audit["outcome"] == "executed"
    since, until = judged_span(audit["output"])
    lines = [line for line in stack.log_lines() if line.get("audit_run_id") == audit["run_id"]]
    assert _missed(lines, audit["run_id"]) == windows_closed_in(config.jobs, since, until) - {
        (deployed(demo), format_rfc3339(instant)) for instant in ours
    }
    other_target = "crm-handler"
    (line,) = [line for line in lines if line.get("recorded_target")]
    assert (line[log_fields.JOB], line[log_fields.SCHEDULE_TIME]) == (deployed(demo), format_rfc3339(taken))
    assert line["recorded_target"] == other_target
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
