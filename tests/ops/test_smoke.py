"""`ops smoke` end to end on loopback: the Cloud Scheduler and Firestore admin REST fakes, the
real function on the Functions Framework, the ledger on the emulator."""

from __future__ import annotations

import dataclasses
import io
from importlib.metadata import version

import pytest

from infra.settings.jobs import AUDIT_JOB_NAME
from infra.settings.stack import StackSettings
from localrun.emulator import free_loopback_port
from ops.context import StackContext, UserError
from ops.exit_codes import ExitCode
from ops.smoke import Endpoints, Smoke
from tests.ops.conftest import Cli, DevFunction, deploy_jobs
from tests.ops.fakes import FakeError, FakeGoogleApis


def ttl_field_name(dev_function: DevFunction) -> str:
    settings = dev_function.settings
    return (
        f"projects/{settings.project}/databases/{settings.database_name}/collectionGroups/"
        f"{settings.runs_collection}/fields/expire_at"
    )


def _deploy(apis: FakeGoogleApis, dev_function: DevFunction, uri: str | None = None) -> str:
    """Every job registered with the fake Scheduler; the name of the one smoke runs unasked,
    the stack's missed-run audit."""
    deploy_jobs(apis, dev_function, uri)
    settings = dev_function.settings
    return f"projects/{settings.project}/locations/{settings.region}/jobs/{deployed_id(dev_function)}"


def deployed_id(dev_function: DevFunction, job: str = AUDIT_JOB_NAME) -> str:
    return dev_function.settings.scheduler_job_id(job)


def _endpoints(apis: FakeGoogleApis) -> list[str]:
    return ["--scheduler-endpoint", apis.endpoint, "--firestore-admin-endpoint", apis.endpoint]


def _step_lines(stdout: str) -> list[str]:
    return [line.split(":")[0] for line in stdout.splitlines() if line.startswith(("PASS", "FAIL"))]


def test_smoke_passes_on_a_working_deployment(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    job_name = _deploy(apis, dev_function)
    apis.ttl_states[ttl_field_name(dev_function)] = "ACTIVE"

    result = cli("smoke", *_endpoints(apis), "--wait", "60")

    assert result.returncode == 0, result.stdout + result.stderr
    assert _step_lines(result.stdout) == [
        f"PASS  force-run Cloud Scheduler job {deployed_id(dev_function)}",
        "PASS  manual run record reaches completed",
        "PASS  TTL policy on scheduler_runs.expire_at",
    ]
    # The audit was force-run, and it alone: none of the stack's own jobs ran unasked.
    assert [(method, path) for method, path, _ in apis.calls if path.endswith(":run")] == [
        ("POST", f"/v1/{job_name}:run")
    ]
    assert apis.deliveries == [200]
    assert all(not dev_function.executions(job) for job in dev_function.settings.jobs)


def test_smoke_runs_one_of_your_jobs_only_when_named(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    _deploy(apis, dev_function)
    apis.ttl_states[ttl_field_name(dev_function)] = "ACTIVE"
    first = dev_function.demo

    result = cli("smoke", *_endpoints(apis), "--wait", "60", "--job", first.name)

    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        _step_lines(result.stdout)[0]
        == f"PASS  force-run Cloud Scheduler job {deployed_id(dev_function, first.name)}"
    )
    assert len(dev_function.executions(first)) == 1


def test_without_an_audit_job_smoke_asks_which_job_to_run(dev_settings: StackSettings) -> None:
    settings = dataclasses.replace(dev_settings, jobs=dev_settings.jobs[:-1], missed_run_audit=False)
    context = StackContext(stack="prod", settings=settings, firestore_project="p", database="d")
    out = io.StringIO()
    with pytest.raises(UserError) as raised:
        Smoke(context, out, Endpoints()).run(None)
    assert str(raised.value) == (
        "stack 'prod' deploys no missed-run audit (missedRunAudit: false), the job smoke force-runs by "
        "default; name one of your jobs with --job, knowing it will really run"
    )
    assert out.getvalue() == ""  # nothing was called


def test_smoke_names_the_failing_steps_and_their_fixes(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    apis.ttl_states[ttl_field_name(dev_function)] = "CREATING"  # no job deployed either

    result = cli(
        "smoke",
        "--wait",
        "5",
        extra_env={"OPS_SCHEDULER_ENDPOINT": apis.endpoint, "OPS_FIRESTORE_ADMIN_ENDPOINT": apis.endpoint},
    )

    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("FAIL  force-run") and "is the stack deployed" in line for line in lines)
    assert any(line.startswith("FAIL  TTL policy") and "CREATING" in line for line in lines)
    assert lines[-1] == "smoke test of stack dev: FAIL"
    assert "Traceback" not in result.stderr


def test_smoke_says_when_the_delivery_never_reaches_the_ledger(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    _deploy(apis, dev_function, uri=f"http://127.0.0.1:{free_loopback_port()}/")  # nothing listens
    apis.ttl_states[ttl_field_name(dev_function)] = "ACTIVE"

    result = cli("smoke", *_endpoints(apis), "--wait", "3")

    assert result.returncode == 1
    assert _step_lines(result.stdout) == [
        f"PASS  force-run Cloud Scheduler job {deployed_id(dev_function)}",
        "FAIL  manual run record reaches completed",
        "PASS  TTL policy on scheduler_runs.expire_at",
    ]
    assert "roles/run.invoker" in result.stdout
    apis.stop()  # waits for the fake's delivery attempt
    assert apis.deliveries == ["ConnectionError"]


def test_smoke_calls_the_apis_through_googles_client_libraries(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    """The official clients announce themselves (x-goog-api-client: gapic/<their release>); a
    hand-written call would not. They speak the REST transport the fakes implement."""
    job_name = _deploy(apis, dev_function)
    field_name = ttl_field_name(dev_function)
    apis.ttl_states[field_name] = "ACTIVE"

    result = cli("smoke", *_endpoints(apis), "--wait", "60")

    assert result.returncode == 0, result.stdout + result.stderr
    calls = {(method, path): headers for method, path, headers in apis.calls}
    for call, distribution in (
        (("POST", f"/v1/{job_name}:run"), "google-cloud-scheduler"),
        (("GET", f"/v1/{field_name}"), "google-cloud-firestore"),
    ):
        assert f"gapic/{version(distribution)}" in calls[call]["x-goog-api-client"].split()
        assert "authorization" not in calls[call]  # a loopback endpoint gets anonymous credentials


def test_smoke_names_the_fix_for_each_google_api_error(
    apis: FakeGoogleApis, dev_function: DevFunction, cli: Cli
) -> None:
    job_name = _deploy(apis, dev_function)
    apis.errors[job_name] = FakeError(
        403, "PERMISSION_DENIED", "Cloud Scheduler API is disabled in project 1", "SERVICE_DISABLED"
    )
    apis.errors[ttl_field_name(dev_function)] = FakeError(
        403, "PERMISSION_DENIED", "Permission 'datastore.indexes.get' denied", "IAM_PERMISSION_DENIED"
    )

    result = cli("smoke", *_endpoints(apis), "--wait", "1")

    assert result.returncode == 1
    force_run, ttl = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert force_run == (
        f"FAIL  force-run Cloud Scheduler job {deployed_id(dev_function)}: enable the API: "
        "`gcloud services enable cloudscheduler.googleapis.com` (pulumi up enables it; wait a minute)"
    )
    assert ttl.startswith("FAIL  TTL policy on scheduler_runs.expire_at: IAM: your identity lacks the ")
    assert "IAM_PERMISSION_DENIED" in ttl and "Permission 'datastore.indexes.get' denied" in ttl
    assert apis.deliveries == [] and "Traceback" not in result.stderr


def test_smoke_says_when_an_api_endpoint_cannot_be_reached(cli: Cli) -> None:
    nothing = f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens there

    result = cli(
        "smoke", "--scheduler-endpoint", nothing, "--firestore-admin-endpoint", nothing, "--wait", "1"
    )

    assert result.returncode == ExitCode.CLOUD_UNREACHABLE
    fails = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert [line.split(": ")[1] for line in fails] == [
        "cannot reach the Cloud Scheduler API",
        "cannot reach the Firestore admin API",
    ]
    assert "Traceback" not in result.stderr
