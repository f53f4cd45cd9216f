"""`ops run-now`: Cloud Scheduler's RunJob through the official client against the loopback
fake, the real function on the Functions Framework, the ledger on the emulator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from exactly_once.audit.schedule import following_fire_times
from exactly_once.delivery.forced_runs import FORCED_RUN_TOLERANCE
from exactly_once.delivery.scheduler_request import Trigger
from exactly_once.ledger.fields import CLAIMED_AT, SCHEDULE_TIME, TRIGGER
from localrun.emulator import free_loopback_port
from ops.exit_codes import ExitCode
from ops.run_now import SCHEDULED_INSTEAD, requested_runs
from tests.ops.conftest import Cli, DevFunction, deploy_jobs
from tests.ops.fakes import FakeError, FakeGoogleApis


def test_run_now_starts_a_manual_run_waits_for_it_and_prints_it(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    deploy_jobs(apis, dev_function)
    demo = dev_function.demo
    before = datetime.now(UTC)

    result = cli("run-now", "--job", demo.name, "--scheduler-endpoint", apis.endpoint, "--wait", "60")

    after = datetime.now(UTC)

    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    assert [(m, p.rsplit("/", 1)[-1]) for m, p, _ in apis.calls] == [
        ("POST", f"{dev_function.settings.scheduler_job_id(demo)}:run")
    ]
    # Cloud Scheduler announced the next scheduled run's time; the run executed once, now.
    announced = next(
        following_fire_times(demo.schedule, ZoneInfo(demo.time_zone), before.replace(microsecond=0))
    )
    (execution,) = dev_function.executions(demo)
    assert execution["schedule_time"] == announced
    status = cli("status", "--job", demo.name)
    assert status.returncode == 0, status.stderr
    (done,) = [line for line in result.stdout.splitlines() if " completed: " in line]
    if "manual run completed" in done:
        # Claimed after `before`, more than the tolerance ahead of its time.
        assert announced - before > FORCED_RUN_TOLERANCE, done
        assert "  manual run claimed " in status.stdout and "result succeeded" in status.stdout
    else:
        # Sent within the tolerance of the quarter hour (a suite that reached this test then):
        # the delivery is that scheduled run, and run-now says so rather than waiting in vain.
        assert SCHEDULED_INSTEAD in done and announced - after <= FORCED_RUN_TOLERANCE, done
    assert "status completed, result succeeded" in done
    assert f"announced schedule time {announced.strftime('%Y-%m-%dT%H:%M:%SZ')}" in done


def _record(trigger: Trigger, schedule_time: datetime, claimed_at: datetime) -> dict[str, object]:
    return {TRIGGER: trigger, SCHEDULE_TIME: schedule_time, CLAIMED_AT: claimed_at}


def test_run_now_waits_for_the_manual_run_else_the_scheduled_run_it_came_just_before() -> None:
    since = datetime(2026, 12, 7, 7, 59, 57, tzinfo=UTC)
    next_time = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    manual = _record(Trigger.FORCED, next_time, since + timedelta(seconds=1))
    scheduled = _record(Trigger.SCHEDULED, next_time, since + timedelta(seconds=1))
    retried = _record(Trigger.SCHEDULED, next_time - timedelta(minutes=15), since + timedelta(seconds=2))
    earlier = _record(Trigger.FORCED, next_time, since - timedelta(seconds=1))

    assert requested_runs([scheduled, manual, retried, earlier], since) == [manual]
    assert requested_runs([scheduled, retried, earlier], since) == [scheduled]
    assert requested_runs([retried, earlier], since) == []


def test_run_now_failures_exit_with_their_own_status(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    demo = dev_function.demo
    endpoint = ["--scheduler-endpoint", apis.endpoint]

    not_deployed = cli("run-now", "--job", demo.name, *endpoint, "--wait", "1")
    assert not_deployed.returncode == ExitCode.RUN_PROBLEM
    assert "is the stack deployed" in not_deployed.stdout

    settings = dev_function.settings
    name = f"projects/{settings.project}/locations/{settings.region}/jobs/{settings.scheduler_job_id(demo)}"
    apis.errors[name] = FakeError(403, "PERMISSION_DENIED", "cloudscheduler.jobs.run denied")
    refused = cli("run-now", "--job", demo.name, *endpoint, "--wait", "1")
    assert refused.returncode == ExitCode.CLOUD_UNREACHABLE, refused.stdout + refused.stderr
    assert "IAM: your identity lacks the permission" in refused.stderr
    del apis.errors[name]

    unknown = cli("run-now", "--job", "no-such-job", *endpoint)
    assert unknown.returncode == ExitCode.USAGE_ERROR and "has no job 'no-such-job'" in unknown.stderr

    deploy_jobs(apis, dev_function, uri=f"http://127.0.0.1:{free_loopback_port()}/")  # nothing listens
    lost = cli("run-now", "--job", demo.name, *endpoint, "--wait", "3")
    assert lost.returncode == ExitCode.RUN_PROBLEM
    assert "no manual run recorded within 3s" in lost.stdout
    assert dev_function.executions(demo) == []
