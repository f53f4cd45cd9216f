"""What the missed-run audit needs to deliver a missed run again, as Cloud Scheduler would.

Each catch-up delivery is a Cloud Tasks task on the stack's queue: an HTTP POST to the
function with the run's original schedule time, the job's own headers and body, and an OIDC
token of the invoker account, the identity Cloud Scheduler signs with. Cloud Run counts
Cloud Tasks of the same project as internal traffic, so the function keeps its internal-only
ingress, and the function's ledger makes each run execute once however often it is sent.

The function cannot name its own run.app URL in its environment (that URL exists only once
the function does), so tasks address it by its cloudfunctions.net URL, which the project,
the region and the function's name decide.
"""

from __future__ import annotations

from exactly_once.audit.config import Delivery, Redelivery
from infra.plan.headers import run_headers
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from infra.targets.registry import kind_of

# The function's role in its name (infra/config/names.py), as infra/resources/function.py deploys it.
FUNCTION_ROLE = "handler"


def function_url(settings: StackSettings) -> str:
    """The function's cloudfunctions.net URL: known before the function exists."""
    return f"https://{settings.region}-{settings.project}.cloudfunctions.net/{settings.names.function_name(FUNCTION_ROLE)}"


def queue_path(settings: StackSettings) -> str:
    """The full resource name of the stack's catch-up queue."""
    return f"projects/{settings.project}/locations/{settings.region}/queues/{settings.names.task_queue_id()}"


def catches_up(settings: StackSettings) -> bool:
    """True when a job of the stack has a catch-up policy: only then is the queue deployed."""
    return settings.missed_run_audit and any(job.catchup is not None for job in settings.jobs)


def redelivery(settings: StackSettings, invoker_email: str) -> Redelivery:
    """Catch-up deliveries through the stack's queue, signed as `invoker_email`."""
    return Redelivery(url=function_url(settings), queue=queue_path(settings), invoker=invoker_email)


def catchup_delivery(settings: StackSettings, job: JobSettings) -> Delivery:
    """What Cloud Scheduler sends with every delivery of `job` but the schedule time: the
    headers, and the body (a sample workflow's by the name the stack gives it)."""
    workflow = None
    if job.sample_workflow and job.target is not None:
        workflow = kind_of(job.target).sample_resource(job.name, settings.placement)
    return Delivery(
        headers=run_headers(settings, job),
        body=job.body_bytes(workflow) or b"",
        deadline_seconds=job.attempt_deadline_seconds,
    )
