"""`ops run-now`: Cloud Scheduler's RunJob through the official client against the loopback
fake, the real function on the Functions Framework, the ledger on the emulator."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from exactly_once.audit.schedule import following_fire_times
from localrun.emulator import free_loopback_port
from ops.exit_codes import ExitCode
from tests.ops.conftest import Cli, DevFunction, deploy_jobs
from tests.ops.fakes import FakeError, FakeGoogleApis


def test_run_now_starts_a_manual_run_waits_for_it_and_prints_it(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    deploy_jobs(apis, dev_function)
    demo = dev_function.demo
    before = datetime.now(UTC)

    result = cli("run-now", "--job", demo.name, "--scheduler-endpoint", apis.endpoint, "--wait", "60")

    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    assert [(m, p.rsplit("/", 1)[-1]) for m, p, _ in apis.calls] == [
        ("POST", f"{dev_function.settings.scheduler_job_id(demo)}:run")
    ]
    (done,) = [line for line in result.stdout.splitlines() if "manual run completed" in line]
    assert "status completed, result succeeded" in done
    # Cloud Scheduler announced the next scheduled run's time; the run executed once, now.
    announced = next(
        following_fire_times(demo.schedule, ZoneInfo(demo.time_zone), before.replace(microsecond=0))
    )
    assert f"announced schedule time {announced.strftime('%Y-%m-%dT%H:%M:%SZ')}" in done
    (execution,) = dev_function.executions(demo)
    assert execution["schedule_time"] == announced

    status = cli("status", "--job", demo.name)
    assert status.returncode == 0, status.stderr
    assert "  manual run claimed " in status.stdout and "result succeeded" in status.stdout


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
