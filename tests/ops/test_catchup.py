"""Catch-up after an outage, on the real function server and the Firestore emulator: the
audit delivers the missed runs of a job with a `catchup` policy again, over loopback HTTP as
a local stack does, and the function's ledger runs each once.

The audits of yesterday's outages run the audit job's code in this process with a horizon of
their own (tests/support/audits.py) and the real loopback sender; one audit is served through
the function, on an outage of the last hours."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from google.cloud.firestore import DocumentSnapshot

from exactly_once import log_fields
from exactly_once.audit.config import AuditedJob, Catchup, CatchupRuns, Redelivery
from exactly_once.audit.schedule import fire_times
from exactly_once.delivery.scheduler_request import RunKey, format_rfc3339
from exactly_once.ledger import lifecycle
from exactly_once.ledger.records import in_progress_record, utc_now
from infra.plan.audit_job import audited_jobs
from infra.settings.environment import function_environment
from infra.settings.jobs import AUDIT_JOB_NAME, JobSettings
from infra.settings.samples import DEMO_JOB
from infra.settings.stack import StackSettings
from localrun.emulator import free_loopback_port
from tests.ops.conftest import DevFunction
from tests.support.audit_runs import ledger_reader
from tests.support.audits import StackAudit, closed_fires, latest_fire, stack_audit
from tests.support.clock import SESSION_DAY
from tests.support.stack_tables import audit_table_env
from tests.support.stacks import with_job
from tests.support.waiting import wait_until

# Started first (tests/conftest.py): it outages caught up through served functions, waiting out leases.
pytestmark = pytest.mark.slow_module

# Three hours: at least the demo job's retry window plus the audit's hour, within the retention.
WINDOW_SECONDS = 3 * 3600


def _day_at(hour: int, minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=2)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _catching_up(settings: StackSettings, runs: CatchupRuns) -> StackSettings:
    return with_job(settings, DEMO_JOB, catchup=Catchup(WINDOW_SECONDS, runs))


def _serve(function_servers, settings, emulator_host, project, db, log_path) -> DevFunction:
    """The dev function whose audit delivers missed runs to the function itself, on loopback."""
    port = free_loopback_port()
    env = {
        **function_environment(settings),
        **audit_table_env(settings, redelivery=Redelivery(url=f"http://127.0.0.1:{port}/")),
        "GOOGLE_CLOUD_PROJECT": project,
        "FIRESTORE_DATABASE": "(default)",
        "FIRESTORE_EMULATOR_HOST": emulator_host,
    }
    return DevFunction(settings, function_servers(env, port=port), db, log_path)


def _audits(function: DevFunction) -> StackAudit:
    """The function's audit run in this process, delivering again to the function on loopback."""
    return stack_audit(function.settings, function.db, redelivery=Redelivery(url=function.server.url))


def _audited(settings: StackSettings, job: JobSettings) -> AuditedJob:
    (found,) = [entry for entry in audited_jobs(settings) if entry.name == settings.scheduler_job_id(job)]
    return found


def _deliver_all(function: DevFunction, job: JobSettings, instants: Iterable[datetime]) -> None:
    """Each run delivered as Scheduler delivers it, a few at once (the job allows overlap)."""
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda instant: function.deliver(job, instant), instants))
    assert [answer.json()["outcome"] for answer in answers] == ["executed"] * len(answers)


def _executed_times(function: DevFunction) -> Counter[datetime]:
    return Counter(record["schedule_time"] for record in function.executions(function.demo))


def _catchup_lines(function: DevFunction, audit_run_id: str) -> list[dict[str, object]]:
    return [
        line
        for line in function.log_lines()
        if line.get(log_fields.EVENT) == log_fields.CATCHUP_DELIVERY
        and line.get("audit_run_id") == audit_run_id
    ]


@pytest.mark.parametrize(
    ("runs", "caught_up"),
    [
        (CatchupRuns.ALL, [(11, 15), (11, 30), (11, 45)]),
        (CatchupRuns.LATEST, [(11, 45)]),
    ],
)
def test_an_outage_of_three_runs_is_caught_up_once_by_the_audit(
    function_servers, emulator_host, project, db, log_path, dev_settings, runs, caught_up
) -> None:
    settings = _catching_up(dev_settings, runs)
    function = _serve(function_servers, settings, emulator_host, project, db, log_path)
    demo = function.demo
    again = [_day_at(*at) for at in caught_up]
    # Runs are delivered every 15 minutes until the outage, which swallows 11:15, 11:30 and 11:45.
    # 09:00 is not delivered either: it lies outside the window of the 12:05 audit.
    before_outage = [_day_at(hour, minute) for hour in (9, 10, 11) for minute in (0, 15, 30, 45)]
    delivered = [t for t in before_outage if t > _day_at(9, 0) and t < _day_at(11, 15)]
    for instant in delivered:
        assert function.deliver(demo, instant).json()["outcome"] == "executed"
    assert _executed_times(function) == Counter(delivered)

    audits = _audits(function)
    audit = audits.run(_day_at(12, 5))
    stamps = [format_rfc3339(t) for t in again]
    assert audit.caught_up() == stamps  # oldest first
    # Each caught-up run executed once, with its original schedule time; nothing else did.
    assert _executed_times(function) == Counter([*delivered, *again])
    lines = audit.events(log_fields.CATCHUP_DELIVERY)
    assert [(line[log_fields.SCHEDULE_TIME], line["delivered"]) for line in lines] == [
        (s, True) for s in stamps
    ]
    assert all("outcome executed" in str(line["via"]) for line in lines)
    # A caught-up run is no missed run; the runs `latest` leaves behind still are.
    missed = {time for job, time in audit.missed() if job == settings.scheduler_job_id(demo)}
    outage = {format_rfc3339(t) for t in (_day_at(11, 15), _day_at(11, 30), _day_at(11, 45))}
    assert missed == outage - set(stamps)

    # The job is back: 12:00 to 12:45 come as scheduled. The next audit delivers nothing again.
    for minute in (0, 15, 30, 45):
        assert function.deliver(demo, _day_at(12, minute)).json()["outcome"] == "executed"
    second = audits.run(_day_at(13, 5), previous=audit)
    assert second.caught_up() == []
    assert second.events(log_fields.CATCHUP_DELIVERY) == []
    expected = Counter([*delivered, *again, *(_day_at(12, minute) for minute in (0, 15, 30, 45))])
    assert _executed_times(function) == expected
    assert max(_executed_times(function).values()) == 1


def test_only_runs_a_delivery_would_claim_are_delivered_again(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    """11:00 failed terminally and 11:30 is still running: a delivery would be answered from the
    record, or refused, so catch-up leaves them alone. 10:45's attempt crashed (its lease lapsed),
    11:15 failed retryably on its every delivery (each failure gives the record back, so no
    attempt holds it) and 11:45 was never delivered: a delivery would claim each of those three,
    and each runs again, once."""
    settings = _catching_up(dev_settings, CatchupRuns.ALL)
    function = _serve(function_servers, settings, emulator_host, project, db, log_path)
    demo = function.demo
    for instant in [_day_at(h, m) for h in (9, 10) for m in (0, 15, 30, 45)]:
        if _day_at(9, 0) < instant < _day_at(10, 45):
            assert function.deliver(demo, instant).json()["outcome"] == "executed"
    crashed = RunKey(settings.project, settings.region, settings.scheduler_job_id(demo), _day_at(10, 45))
    lease = timedelta(seconds=1)
    record = in_progress_record(crashed, "crashed", utc_now(), lease=lease, retention=timedelta(days=1))
    function.db.collection(settings.runs_collection).document(crashed.run_id).set(record)
    read = ledger_reader(function.db, settings.runs_collection)

    def lapsed() -> bool:
        stored = read([crashed.run_id]).get(crashed.run_id)
        return lifecycle.state_of(stored, lease) is lifecycle.State.LAPSED

    wait_until(lapsed, timeout=30, what="the crashed attempt's lease to lapse")
    terminal = function.deliver(demo, _day_at(11, 0), body=b'{"sleep_seconds": -1}').json()
    assert terminal["outcome"] == "failed_terminal"
    released = function.deliver(demo, _day_at(11, 15), body=b'{"fail": true}').json()
    assert released["outcome"] == "failed_released"

    audits = _audits(function)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(function.deliver, demo, _day_at(11, 30), b'{"sleep_seconds": 20}')
        run_id = RunKey(
            settings.project, settings.region, settings.scheduler_job_id(demo), _day_at(11, 30)
        ).run_id
        document = function.db.collection(settings.runs_collection).document(run_id)

        def claimed() -> bool:
            return cast(DocumentSnapshot, document.get()).exists

        wait_until(claimed, timeout=60, what="the 11:30 attempt's claim")
        audit = audits.run(_day_at(12, 5))
        assert running.result(timeout=120).json()["outcome"] == "executed"

    assert audit.caught_up() == [format_rfc3339(_day_at(h, m)) for h, m in ((10, 45), (11, 15), (11, 45))]
    lines = audit.events(log_fields.CATCHUP_DELIVERY)
    assert [line["recorded"] for line in lines] == [True, False, False]  # 11:15's record was given back
    assert "outcome lease_taken_over" in str(lines[0]["via"])  # the crashed attempt's lease
    executed = _executed_times(function)
    assert [executed[_day_at(h, m)] for h, m in ((10, 45), (11, 0), (11, 15), (11, 30), (11, 45))] == [
        1,
        0,
        1,
        1,
        1,
    ]


def test_a_served_audit_catches_an_outage_up_once_and_its_redelivery_sends_nothing(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    """The audit as the function runs it, on its own clock (its claim: now): the three latest
    runs whose retry window closed were lost; every other run of the window was delivered."""
    settings = _catching_up(dev_settings, CatchupRuns.ALL)
    function = _serve(function_servers, settings, emulator_host, project, db, log_path)
    demo = function.demo
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    now = datetime.now(UTC)
    outage = closed_fires(_audited(settings, demo), now, 3)
    # From a minute before the window the audit walks (the 3 hours up to its claim) to now.
    window = fire_times(demo.schedule, demo.time_zone, now - timedelta(seconds=WINDOW_SECONDS + 60), now)
    delivered = [t for t in window if t not in outage]
    _deliver_all(function, demo, delivered)

    scheduled = latest_fire(_audited(settings, audit_job), now)
    audit = function.deliver(audit_job, scheduled).json()
    assert audit["outcome"] == "executed"
    stamps = [format_rfc3339(t) for t in outage]
    assert [entry["schedule_time"] for entry in audit["output"]["caught_up"]] == stamps  # oldest first
    lines = _catchup_lines(function, audit["run_id"])
    assert [(line[log_fields.SCHEDULE_TIME], line["delivered"]) for line in lines] == [
        (s, True) for s in stamps
    ]
    assert all("outcome executed" in str(line["via"]) for line in lines)
    assert _executed_times(function) == Counter([*delivered, *outage])

    # A redelivered audit run is a duplicate: it delivers nothing, and nothing runs again.
    lines_before = len(function.log_lines())
    assert function.deliver(audit_job, scheduled).json()["outcome"] == "duplicate_completed"
    new_lines = function.log_lines()[lines_before:]
    assert [line.get(log_fields.EVENT) for line in new_lines] == [None]  # only the delivery's own line
    assert _executed_times(function) == Counter([*delivered, *outage])
