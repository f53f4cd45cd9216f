"""`backfill`: re-deliver one scheduled run to the function, exactly as Cloud Scheduler would.

The request carries the run's original ScheduleTime and the stack's own headers, so it has
the same run id as the lost deliveries: a run that completed meanwhile is answered as a
duplicate and not executed again, and a missed run executes once however often it is sent.
It also says `Cache-Control: no-cache`: the function then decides from the ledger alone, never
from a warm instance's memory of completed runs, so an operator who deleted a run's record to
redo it (docs/operations.md) is not answered from a cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime
from typing import TextIO

import google.auth
import requests
from google.auth import exceptions as auth_exceptions
from google.auth import impersonated_credentials
from google.auth.transport.requests import Request

from exactly_once.audit.missed_runs import fire_times
from exactly_once.delivery.request_checks import CACHE_CONTROL_HEADER
from exactly_once.delivery.request_checks import NO_CACHE as NO_CACHE_DIRECTIVE
from exactly_once.delivery.scheduler_request import format_rfc3339
from ops.context import StackContext, UserError, is_loopback

# The function answers within its timeout; the request waits a little longer than that.
TIMEOUT_MARGIN_SECONDS = 15.0
# A re-delivery is decided by the ledger, never by the function's in-memory cache.
NO_CACHE = {CACHE_CONTROL_HEADER: NO_CACHE_DIRECTIVE}
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


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
        raise UserError(
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
) -> int:
    """Deliver the run of `job` scheduled at `at`; 0 when the function accepted it (executed
    or already completed), 1 otherwise. A time off the job's schedule is refused unsent."""
    settings = context.job(job)
    if fire_times(settings.schedule, settings.time_zone, at, at) != [at]:
        raise UserError(
            f"--at {format_rfc3339(at)} is not a fire time of job {job!r} "
            f"(schedule {settings.schedule!r} in {settings.time_zone}); nothing was sent"
        )
    headers = {**context.settings.delivery_headers(context.job(job), at), **NO_CACHE}
    data = delivery_body(context, job, body)
    target = url or stack_output(context.stack, "functionUri", "--url")
    if not is_loopback(target):
        email = invoker or stack_output(context.stack, "invokerServiceAccount", "--invoker")
        headers["Authorization"] = f"Bearer {id_token_for(email, target)}"
    timeout = context.settings.function_timeout_seconds + TIMEOUT_MARGIN_SECONDS
    try:
        response = requests.post(target, headers=headers, data=data, timeout=timeout)
    except requests.RequestException as error:
        out.write(f"backfill of {job} at {format_rfc3339(at)}: no answer from {target}: {error}\n")
        return 1
    try:
        answer = response.json()
    except ValueError:
        answer = {"outcome": None, "message": response.text[:200]}
    outcome = answer.get("outcome")
    out.write(
        f"backfill of {job} at {format_rfc3339(at)}: HTTP {response.status_code}, outcome {outcome}: "
        f"{answer.get('message')}\n"
    )
    # A terminal failure is answered 200 (retrying cannot help), but the run did not succeed.
    return 0 if response.ok and outcome != "failed_terminal" else 1
