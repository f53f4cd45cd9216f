"""How the audit delivers a missed run again: a Cloud Tasks task in the cloud, a loopback
POST on a local stack. Both send what Cloud Scheduler sends for the run: its job's headers,
its original schedule time and its body, plus `Cache-Control: no-cache`, so the function
decides from the ledger alone and the run keeps the lost run's id.

Cloud Tasks is the one sender in the cloud: the function's ingress is internal-only, and
Cloud Run counts Cloud Tasks of the same project as internal, where the function's own
outbound request would not be (it would need a VPC). The task carries an OIDC token of the
invoker account, so the function admits it as it admits Cloud Scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from exactly_once.audit.config import AUDIT_TABLE_KEY, AuditedJob, Redelivery
from exactly_once.config import JOB_TABLE_ENV, ConfigError
from exactly_once.delivery.request_checks import CACHE_CONTROL_HEADER, NO_CACHE
from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER
from exactly_once.endpoints import CLOUD_TASKS_ENDPOINT_ENV, ApiEndpoint, endpoint_from_env
from exactly_once.loopback import is_loopback_http_url
from exactly_once.run_key import format_rfc3339

# A loopback delivery waits this long for the function's answer (a local stack's job).
LOOPBACK_TIMEOUT_SECONDS = 120.0
_API_TIMEOUT_SECONDS = 30.0

# Sends one run again; returns what took it (a task's name, a loopback answer).
Sender = Callable[[AuditedJob, datetime], str]


class RedeliveryError(Exception):
    """A catch-up delivery could not be handed over; the run stays missed for the next audit."""


def request_headers(job: AuditedJob, schedule_time: datetime) -> dict[str, str]:
    """The headers of a catch-up delivery of `job`'s run at `schedule_time`."""
    if job.delivery is None:
        raise RedeliveryError(f"job {job.name} has no catch-up delivery configured")
    return {
        **job.delivery.headers,
        SCHEDULE_TIME_HEADER: format_rfc3339(schedule_time),
        CACHE_CONTROL_HEADER: NO_CACHE,
    }


def check_redelivery(redelivery: Redelivery) -> None:
    """Read at start-up: a URL without a queue is posted to from the instance itself, which
    only a local stack may do (a deployed function's own request would not be internal)."""
    if redelivery.queue is None and not is_loopback_http_url(redelivery.url):
        raise ConfigError(
            JOB_TABLE_ENV,
            f"the job table's {AUDIT_TABLE_KEY}.redelivery.url {redelivery.url!r} without a queue must be "
            "http://<loopback>",
        )


def sender_for(redelivery: Redelivery, env: Mapping[str, str]) -> Sender:
    """The sender `redelivery` describes; a URL that is neither a queue's nor loopback is refused."""
    check_redelivery(redelivery)
    if redelivery.queue is None:
        return _loopback_sender(redelivery.url)
    return _task_sender(redelivery, endpoint_from_env(env, CLOUD_TASKS_ENDPOINT_ENV))


def _loopback_sender(url: str) -> Sender:
    import requests

    def send(job: AuditedJob, schedule_time: datetime) -> str:
        assert job.delivery is not None
        try:
            response = requests.post(
                url,
                headers=request_headers(job, schedule_time),
                data=job.delivery.body,
                timeout=job.delivery.deadline_seconds or LOOPBACK_TIMEOUT_SECONDS,
            )
        except requests.RequestException as error:
            raise RedeliveryError(f"POST {url}: {error}") from None
        try:
            outcome = response.json().get("outcome")
        except ValueError:
            outcome = None
        return f"POST {url}: HTTP {response.status_code}, outcome {outcome}"

    return send


def _task_sender(redelivery: Redelivery, endpoint: ApiEndpoint) -> Sender:
    from google.api_core import exceptions as api_exceptions
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.tasks_v2 import CloudTasksClient, HttpMethod, HttpRequest, OidcToken, Task

    options: dict[str, object] = {"transport": "rest"}
    if endpoint.url is not None:
        options["client_options"] = ClientOptions(api_endpoint=endpoint.url)
    if endpoint.plaintext:
        options["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
    client = CloudTasksClient(**options)  # type: ignore[arg-type]
    queue, invoker = redelivery.queue, redelivery.invoker

    def send(job: AuditedJob, schedule_time: datetime) -> str:
        assert job.delivery is not None
        task = Task(
            http_request=HttpRequest(
                url=redelivery.url,
                http_method=HttpMethod.POST,
                headers=request_headers(job, schedule_time),
                body=job.delivery.body,
                oidc_token=OidcToken(service_account_email=invoker, audience=redelivery.url),
            ),
        )
        if job.delivery.deadline_seconds is not None:
            task.dispatch_deadline = timedelta(seconds=job.delivery.deadline_seconds)
        try:
            created = client.create_task(parent=queue, task=task, timeout=_API_TIMEOUT_SECONDS)
        except (api_exceptions.GoogleAPIError, OSError) as error:
            raise RedeliveryError(f"Cloud Tasks create_task on {queue}: {error}") from None
        return f"task {created.name}"

    return send
