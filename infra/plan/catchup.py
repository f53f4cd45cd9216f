"""What the missed-run audit needs to deliver a missed run again, as Cloud Scheduler would.

Each catch-up delivery is a Cloud Tasks task on the stack's queue: an HTTP POST to the
function with the run's original schedule time, the job's own headers and body, and an OIDC
token of the invoker account, the identity Cloud Scheduler signs with. Cloud Run counts
Cloud Tasks of the same project as internal traffic, so the function keeps its internal-only
ingress, and the function's ledger makes each run execute once however often it is sent.

With a second region, each region has its queue, delivering to its own region's function: the
audit runs in whichever region delivers it, and sends through that region's queue
(exactly_once.audit.config.REGION_ENV), so a region that is down takes no catch-up with it.

The function cannot name its own run.app URL in its environment (that URL exists only once
the function does), so tasks address it by its cloudfunctions.net URL, which the project,
the region and the function's name decide.
"""

from __future__ import annotations

from collections.abc import Mapping

from exactly_once.audit.config import Delivery, Redelivery
from infra.plan.headers import run_headers
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.targets.registry import kind_of

# The function's role in its name (policy/scheduler_guardrails/rules/config/names.py), as
# infra/resources/function.py deploys it.
FUNCTION_ROLE = "handler"


def function_url(settings: StackSettings, region: str | None = None) -> str:
    """The cloudfunctions.net URL of the function in `region` (None: the first): known before
    the function exists."""
    location = region or settings.region
    return f"https://{location}-{settings.project}.cloudfunctions.net/{settings.names.function_name(FUNCTION_ROLE)}"


def queue_path(settings: StackSettings, queue_id: str, region: str | None = None) -> str:
    """The full resource name of the catch-up queue `queue_id` in `region` (None: the first).
    The id is the one the queue was created with (StackNames.task_queue_id: it ends in its
    creation time), which only the deployed stack knows: the program reads it from the queue
    resource; `ops` reads the full name from the stack output `catchupQueue`."""
    location = region or settings.region
    return f"projects/{settings.project}/locations/{location}/queues/{queue_id}"


def catches_up(settings: StackSettings) -> bool:
    """True when a job of the stack has a catch-up policy: only then is the queue deployed."""
    return settings.missed_run_audit and any(job.catchup is not None for job in settings.jobs)


def redelivery(settings: StackSettings, invoker_email: str, queue: str) -> Redelivery:
    """Catch-up deliveries through the first region's queue (its full name), signed as
    `invoker_email`."""
    return Redelivery(url=function_url(settings), queue=queue, invoker=invoker_email)


def redeliveries(
    settings: StackSettings, invoker_email: str, queues: Mapping[str, str]
) -> tuple[Redelivery, ...]:
    """What the job table says about catch-up deliveries, `queues` being each region's queue
    (its full name, queue_path): with one region, the one every function uses (the table as it
    always was); with two, each region's through its own queue to its own function, named by
    the region each function finds in REGION_ENV."""
    if len(settings.regions) == 1:
        return (redelivery(settings, invoker_email, queues[settings.region]),)
    return tuple(
        Redelivery(
            url=function_url(settings, region),
            queue=queues[region],
            invoker=invoker_email,
            region=region,
        )
        for region in settings.regions
    )


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
