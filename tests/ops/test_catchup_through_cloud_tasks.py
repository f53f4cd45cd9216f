"""Catch-up as a deployed stack does it: the audit creates one Cloud Tasks task per missed run
through the official client (REST) against the loopback fake, which delivers each to the real
function, as Cloud Tasks does; and `ops backfill --since/--until` through the same queue.

The served audit catches up an outage of the last hours (its clock is its claim: now); the
audits of yesterday's outage run the audit job's code here, on clocks of their own
(tests/support/audits.py), with the same Cloud Tasks sender."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from exactly_once.audit.config import CatchupRuns, Redelivery
from exactly_once.audit.schedule import fire_times
from exactly_once.delivery.request_checks import CACHE_CONTROL_HEADER, NO_CACHE
from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER, format_rfc3339
from exactly_once.endpoints import CLOUD_TASKS_ENDPOINT_ENV
from infra.plan.catchup import queue_path, redeliveries
from infra.settings.environment import function_environment
from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.stack import StackSettings
from localrun.emulator import free_loopback_port
from ops.catchup import backfill_range
from ops.context import StackContext
from ops.exit_codes import ExitCode
from tests.ops.conftest import STACK, DevFunction
from tests.ops.test_catchup import WINDOW_SECONDS, _audited, _catching_up, _deliver_all, _executed_times
from tests.support.audits import closed_fires, latest_fire, stack_audit
from tests.support.clock import SESSION_DAY
from tests.support.fake_cloud_tasks import FakeCloudTasks
from tests.support.stack_tables import audit_table_env
from tests.support.waiting import wait_until

INVOKER = "eos-dev-invoker@my-gcp-project.iam.gserviceaccount.com"
# When the stack's queues were created: a deployed queue's name ends in it.
QUEUES_CREATED = 1767225600


def _queue(settings: StackSettings, region: str | None = None) -> str:
    """The full name of the stack's catch-up queue in `region` (None: the first), as deployed."""
    return queue_path(settings, settings.names.task_queue_id(QUEUES_CREATED), region)


def _day_at(hour: int, minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=2)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


@pytest.fixture
def tasks() -> Iterator[FakeCloudTasks]:
    fake = FakeCloudTasks().start()
    yield fake
    fake.stop()


def _serve(
    function_servers, settings, tasks, emulator_host, project, db, log_path, region: str | None = None
) -> DevFunction:
    """The function of `settings` (in `region`: None, the first), catching up through its
    region's queue, as the stack configures it; every region's function URL but its own is
    the cloudfunctions.net one a stack names, which nothing here serves."""
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}/"
    served = region or settings.region
    resend = tuple(
        dataclasses.replace(item, url=url) if item.region in (None, served) else item
        for item in redeliveries(
            settings, INVOKER, {region: _queue(settings, region) for region in settings.regions}
        )
    )
    env = {
        **function_environment(settings, region),
        **audit_table_env(settings, redelivery=resend),
        CLOUD_TASKS_ENDPOINT_ENV: tasks.endpoint,
        "GOOGLE_CLOUD_PROJECT": project,
        "FIRESTORE_DATABASE": "(default)",
        "FIRESTORE_EMULATOR_HOST": emulator_host,
    }
    tasks.queues.add(_queue(settings, served))
    return DevFunction(settings, function_servers(env, port=port), db, log_path)


def test_the_audit_delivers_missed_runs_as_tasks_signed_as_the_invoker(
    function_servers, tasks, emulator_host, project, db, log_path, dev_settings
) -> None:
    """Served: the function's audit (its clock: its claim, now) creates the tasks through the
    official client. The three latest runs whose retry window closed were lost; every other run
    of the catch-up window was delivered."""
    settings = _catching_up(dev_settings, CatchupRuns.ALL)
    function = _serve(function_servers, settings, tasks, emulator_host, project, db, log_path)
    demo = function.demo
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    now = datetime.now(UTC)
    missed = closed_fires(_audited(settings, demo), now, 3)
    window = fire_times(demo.schedule, demo.time_zone, now - timedelta(seconds=WINDOW_SECONDS + 60), now)
    delivered = [t for t in window if t not in missed]
    _deliver_all(function, demo, delivered)

    audit = function.deliver(audit_job, latest_fire(_audited(settings, audit_job), now)).json()
    assert audit["outcome"] == "executed"
    assert [t["httpRequest"]["headers"][SCHEDULE_TIME_HEADER] for t in tasks.tasks] == [
        format_rfc3339(t) for t in missed
    ]
    (first, *_) = tasks.tasks
    request = first["httpRequest"]
    assert request["url"] == function.server.url and request["httpMethod"] == "POST"
    assert request["oidcToken"] == {"serviceAccountEmail": INVOKER, "audience": function.server.url}
    assert request["headers"][JOB_NAME_HEADER] == settings.scheduler_job_id(demo)
    assert request["headers"][CACHE_CONTROL_HEADER] == NO_CACHE
    assert first["dispatchDeadline"] == "60s"
    assert [entry["via"] for entry in audit["output"]["caught_up"]] == [
        f"task {t['name']}" for t in tasks.tasks
    ]

    wait_until(lambda: len(tasks.deliveries) == 3, timeout=120, what="the three tasks' deliveries")
    tasks.join()
    assert tasks.deliveries == [200, 200, 200]
    assert _executed_times(function) == {t: 1 for t in [*delivered, *missed]}


def test_the_second_regions_audit_catches_up_through_its_own_queue_to_its_own_function(
    function_servers, tasks, emulator_host, project, db, log_path, dev_settings
) -> None:
    """Two regions, the first one down: the audit the second region's Scheduler delivers
    creates its tasks on the second region's queue (the only one the fake serves: a task on the
    first's is NOT_FOUND, a failed hand-over), addressed to the second region's function."""
    second = "europe-west4"
    settings = dataclasses.replace(_catching_up(dev_settings, CatchupRuns.LATEST), second_region=second)
    function = _serve(function_servers, settings, tasks, emulator_host, project, db, log_path, region=second)
    demo = function.demo
    audit_job = next(job for job in settings.jobs if job.name == AUDIT_JOB_NAME)
    now = datetime.now(UTC)
    (missed,) = closed_fires(_audited(settings, demo), now, 1)

    audit = function.deliver(audit_job, latest_fire(_audited(settings, audit_job), now)).json()
    assert audit["outcome"] == "executed"
    (task,) = tasks.tasks
    assert task["name"].startswith(f"{_queue(settings, second)}/tasks/")
    request = task["httpRequest"]
    assert request["url"] == function.server.url
    assert request["oidcToken"] == {"serviceAccountEmail": INVOKER, "audience": function.server.url}
    assert request["headers"][SCHEDULE_TIME_HEADER] == format_rfc3339(missed)
    wait_until(lambda: len(tasks.deliveries) == 1, timeout=120, what="the task's delivery")
    tasks.join()
    assert tasks.deliveries == [200]
    assert _executed_times(function)[missed] == 1


def test_a_refused_task_leaves_the_run_to_the_next_audit(
    function_servers, tasks, emulator_host, project, db, log_path, dev_settings
) -> None:
    settings = _catching_up(dev_settings, CatchupRuns.ALL)
    function = _serve(function_servers, settings, tasks, emulator_host, project, db, log_path)
    demo = function.demo
    outage = [_day_at(11, 15), _day_at(11, 30), _day_at(11, 45)]
    for instant in [_day_at(h, m) for h in (9, 10, 11, 12) for m in (0, 15, 30, 45)]:
        if _day_at(9, 0) < instant and instant not in outage:
            assert function.deliver(demo, instant).json()["outcome"] == "executed"
    # The audits of 12:05 and 13:05, run here on those clocks, through the same queue.
    resend = Redelivery(url=function.server.url, queue=_queue(settings), invoker=INVOKER)
    audits = stack_audit(
        settings, db, redelivery=resend, sender_env={CLOUD_TASKS_ENDPOINT_ENV: tasks.endpoint}
    )
    tasks.failures.append(403)  # the first CreateTask is refused (cloudtasks.tasks.create denied)

    audit = audits.run(_day_at(12, 5))
    assert audit.caught_up() == [format_rfc3339(t) for t in outage[1:]]
    (refused,) = [line for line in audit.events("catchup_delivery") if line["delivered"] is False]
    assert (refused["schedule_time"], refused["severity"]) == (format_rfc3339(outage[0]), "ERROR")
    # A run whose hand-over failed is still a missed run.
    assert (settings.scheduler_job_id(demo), format_rfc3339(outage[0])) in audit.missed()
    wait_until(lambda: len(tasks.deliveries) == 2, timeout=120, what="two tasks' deliveries")

    # The next audit hands the refused one over, and nothing else.
    second = audits.run(_day_at(13, 5), previous=audit)
    assert second.caught_up() == [format_rfc3339(outage[0])]
    wait_until(lambda: len(tasks.deliveries) == 3, timeout=120, what="the third task's delivery")
    tasks.join()
    assert tasks.deliveries == [200, 200, 200]
    assert [_executed_times(function)[t] for t in outage] == [1, 1, 1]


def test_ops_backfill_of_a_range_creates_tasks_and_sends_nothing_itself(
    function_servers, tasks, emulator_host, project, db, log_path, dev_settings, monkeypatch
) -> None:
    settings = _catching_up(dev_settings, CatchupRuns.ALL)
    function = _serve(function_servers, settings, tasks, emulator_host, project, db, log_path)
    demo = function.demo
    assert function.deliver(demo, _day_at(10, 0)).json()["outcome"] == "executed"
    monkeypatch.setenv(CLOUD_TASKS_ENDPOINT_ENV, tasks.endpoint)
    out = io.StringIO()
    code = backfill_range(
        StackContext(STACK, settings, project, "(default)"),
        out,
        job=demo.name,
        since=_day_at(10, 0),
        until=_day_at(10, 50),
        only_missed=True,
        url=function.server.url.replace("http://", "https://"),  # as a deployed function's
        invoker=INVOKER,
        queue=_queue(settings),
    )
    assert code == ExitCode.OK, out.getvalue()
    assert [t["httpRequest"]["headers"][SCHEDULE_TIME_HEADER] for t in tasks.tasks] == [
        format_rfc3339(_day_at(10, m)) for m in (15, 30, 45)
    ]
    assert out.getvalue().count("  delivered: task projects/") == 3
    assert f"{format_rfc3339(_day_at(10, 0))}  {demo.name}  not delivered: completed" in out.getvalue()
