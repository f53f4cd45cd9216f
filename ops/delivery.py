"""`backfill` and `redo`: deliver one scheduled run to the function, as Cloud Scheduler would.

The request carries the run's original ScheduleTime and the stack's own headers, so it has
the same run id as the lost deliveries: a run that completed meanwhile is answered as a
duplicate and not executed again, and a missed run executes once however often it is sent.
It also says `Cache-Control: no-cache`: the function then decides from the ledger alone, never
from a warm instance's memory of completed runs.

`redo` runs a completed run again (after fixing what made it fail terminally, say): it deletes
the run's record, on the condition that nobody wrote it since it was read, then delivers it
like `backfill`. It refuses a run in progress: deleting a live claim would let the redo run
the job beside the attempt that holds it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timedelta
from typing import TextIO

import google.auth
import requests
from google.auth import exceptions as auth_exceptions
from google.auth import impersonated_credentials
from google.auth.transport.requests import Request

from exactly_once.audit.schedule import fire_times
from exactly_once.delivery.request_checks import CACHE_CONTROL_HEADER
from exactly_once.delivery.request_checks import NO_CACHE as NO_CACHE_DIRECTIVE
from exactly_once.delivery.scheduler_request import format_rfc3339, run_key_from_headers
from exactly_once.ledger import lifecycle
from exactly_once.ledger.store import FirestoreRunStore, StaleWrite
from infra.plan.headers import delivery_headers
from ops.context import CloudUnreachable, StackContext, UserError, is_loopback
from ops.exit_codes import ExitCode

# The function answers within its timeout; the request waits a little longer than that.
TIMEOUT_MARGIN_SECONDS = 15.0
# A re-delivery is decided by the ledger, never by the function's in-memory cache.
NO_CACHE = {CACHE_CONTROL_HEADER: NO_CACHE_DIRECTIVE}
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# How long redo's read and conditional delete of a run record may take, retries included.
LEDGER_TIMEOUT_SECONDS = 30.0


def stack_output(stack: str, key: str, flag: str) -> str:
    """A `pulumi stack output`, for what only the deployed stack knows (URLs, emails)."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise UserError(
            f"pass {flag}: the Pulumi CLI, which would read the stack output {key!r}, is not on PATH"
        )
    result = subprocess.run(
        [pulumi, "stack", "output", key, "--stack", stack],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise UserError(
            f"pass {flag}: `pulumi stack output {key} --stack {stack}` failed: {result.stderr.strip()}"
        )
    return result.stdout.strip()


def id_token_for(invoker_email: str, audience: str) -> str:
    """An ID token of the invoker account (the identity Cloud Scheduler signs its calls with),
    minted by impersonation: the operator needs roles/iam.serviceAccountTokenCreator on it."""
    try:
        return _impersonated_id_token(invoker_email, audience)
    except auth_exceptions.GoogleAuthError as error:
        raise CloudUnreachable(
            f"cannot mint an ID token as {invoker_email}: {str(error).rstrip('.')}. Log in with "
            "`gcloud auth application-default login` and hold roles/iam.serviceAccountTokenCreator "
            "on that account; nothing was sent"
        ) from None


def _impersonated_id_token(invoker_email: str, audience: str) -> str:
    source, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    target = impersonated_credentials.Credentials(  # type: ignore[no-untyped-call]
        source_credentials=source, target_principal=invoker_email, target_scopes=[CLOUD_PLATFORM_SCOPE]
    )
    tokens = impersonated_credentials.IDTokenCredentials(  # type: ignore[no-untyped-call]
        target, target_audience=audience, include_email=True
    )
    tokens.refresh(Request())
    return str(tokens.token)


def delivery_body(context: StackContext, job_name: str, body: str | None) -> bytes:
    job = context.job(job_name)
    if body is not None:
        try:
            json.loads(body)
        except json.JSONDecodeError as error:
            raise UserError(f"--body: not JSON ({error.msg})") from None
        return body.encode()
    if job.sample_workflow:
        raise UserError(
            f"job {job_name!r} sends the name of the workflow the stack deployed for it: pass "
            '--body \'{"workflow": "<see pulumi stack output sampleWorkflows>"}\''
        )
    return job.body_bytes() or b""


def backfill(
    context: StackContext,
    out: TextIO,
    *,
    job: str,
    at: datetime,
    url: str | None = None,
    invoker: str | None = None,
    body: str | None = None,
) -> ExitCode:
    """Deliver the run of `job` scheduled at `at`; OK when the function accepted it (executed
    or already completed), RUN_PROBLEM when it did not, CLOUD_UNREACHABLE when the request
    never reached it. A time off the job's schedule is refused unsent."""
    headers = _run_headers(context, job, at)
    data = delivery_body(context, job, body)
    target, headers = _addressed(context, headers, url, invoker)
    return _send(context, out, f"backfill of {job} at {format_rfc3339(at)}", target, headers, data)


def redo(
    context: StackContext,
    out: TextIO,
    *,
    job: str,
    at: datetime,
    url: str | None = None,
    invoker: str | None = None,
    body: str | None = None,
) -> ExitCode:
    """Delete the completed record of `job`'s run at `at`, then deliver the run again;
    RUN_PROBLEM and nothing deleted when the run is in progress or its record changes meanwhile. Everything
    that can be refused (the time, the body, the URL, the token) is settled before the delete."""
    headers = _run_headers(context, job, at)
    data = delivery_body(context, job, body)
    target, addressed = _addressed(context, headers, url, invoker)
    run = f"run of {job} at {format_rfc3339(at)}"
    store = FirestoreRunStore(context.firestore(), context.settings.runs_collection)
    run_id = run_key_from_headers(headers, context.settings.job_run_keys()).run_id
    record = store.get(run_id, timeout=LEDGER_TIMEOUT_SECONDS)
    fields = record.fields if record is not None else {}
    if record is None:
        out.write(f"redo of the {run}: it has no record, nothing to delete\n")
        return _send(context, out, f"redo of {job} at {format_rfc3339(at)}", target, addressed, data)
    state = lifecycle.state_of(record, timedelta(seconds=context.settings.lease_seconds))
    try:
        lifecycle.step(state, lifecycle.Event.REDO)  # the table's delete, conditioned on this read
    except lifecycle.NoTransition:
        out.write(
            f"redo of the {run}: not done, the run is {state.value} (attempt "
            f"{fields.get('attempt_id')}); redo deletes only a completed run's record: wait for it to "
            "finish, or, if its attempt died, backfill it once its lease has ended\n"
        )
        return ExitCode.RUN_PROBLEM
    try:
        store.delete(run_id, if_updated_at=record.update_time, timeout=LEDGER_TIMEOUT_SECONDS)
    except StaleWrite:
        out.write(f"redo of the {run}: not done, its record changed while redo read it; run redo again\n")
        return ExitCode.RUN_PROBLEM
    out.write(
        f"redo of the {run}: deleted its record (result {fields.get('result')}, attempt "
        f"{fields.get('attempt_id')})\n"
    )
    return _send(context, out, f"redo of {job} at {format_rfc3339(at)}", target, addressed, data)


def _run_headers(context: StackContext, job: str, at: datetime) -> dict[str, str]:
    """What Cloud Scheduler sends for the run, plus no-cache; a time off the schedule is refused."""
    settings = context.job(job)
    if fire_times(settings.schedule, settings.time_zone, at, at) != [at]:
        raise UserError(
            f"--at {format_rfc3339(at)} is not a fire time of job {job!r} "
            f"(schedule {settings.schedule!r} in {settings.time_zone}); nothing was sent"
        )
    return {**delivery_headers(context.settings, settings, at), **NO_CACHE}


def _addressed(
    context: StackContext, headers: dict[str, str], url: str | None, invoker: str | None
) -> tuple[str, dict[str, str]]:
    """The function's URL, and the headers with the invoker's ID token (none on loopback)."""
    target = url or stack_output(context.stack, "functionUri", "--url")
    if is_loopback(target):
        return target, headers
    email = invoker or stack_output(context.stack, "invokerServiceAccount", "--invoker")
    return target, {**headers, "Authorization": f"Bearer {id_token_for(email, target)}"}


def _send(
    context: StackContext, out: TextIO, about: str, target: str, headers: dict[str, str], data: bytes
) -> ExitCode:
    timeout = context.settings.function_timeout_seconds + TIMEOUT_MARGIN_SECONDS
    try:
        response = requests.post(target, headers=headers, data=data, timeout=timeout)
    except requests.RequestException as error:
        out.write(f"{about}: no answer from {target}: {error}\n")
        return ExitCode.CLOUD_UNREACHABLE
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "outcome" not in answer:
        # Stopped before the function (its front end's page): the run was not judged at all.
        out.write(f"{about}: {not_the_function(response.status_code, target, context.settings.ingress)}\n")
        return ExitCode.CLOUD_UNREACHABLE
    outcome = answer.get("outcome")
    out.write(f"{about}: HTTP {response.status_code}, outcome {outcome}: {answer.get('message')}\n")
    if answer.get("output") is not None:
        # What the job returned (a proxy job: the execution or job it started, and whether an
        # earlier attempt's was reused), so an operator sees what a redo led to.
        out.write(f"{about}: output {json.dumps(answer['output'], sort_keys=True)}\n")
    # A terminal failure is answered 200 (retrying cannot help), but the run did not succeed.
    return ExitCode.OK if response.ok and outcome != "failed_terminal" else ExitCode.RUN_PROBLEM


def not_the_function(status: int, url: str, ingress: str) -> str:
    """One line for an answer that is not the function's JSON: the request was stopped before
    it (an HTML error page of Google's front end, or of whatever else answers at `url`)."""
    if status == 404 and ingress != "ALLOW_ALL":
        return (
            f"HTTP 404 from {url}, not the function's answer: its ingress {ingress} refuses callers "
            "outside the project's VPC networks, so run this from a machine inside one (a VM in the "
            "project's network); `gcloud scheduler jobs run` delivers from inside, but as a forced run of "
            "its own, not as this schedule time's"
        )
    if status in (401, 403):
        return (
            f"HTTP {status} from {url}, not the function's answer: Cloud Run refused the ID token; the "
            "invoker account needs roles/run.invoker on the function and the token's audience must be "
            "the function's URL (--url)"
        )
    return f"HTTP {status} from {url}, not the function's answer: is --url the function's URL?"
