"""Proxy job: one Cloud Run job execution per scheduled run, carrying the run's token.

Cloud Scheduler calling run.googleapis.com `jobs.run` directly starts a new execution on every
retry. Routed through the deduplicating function instead, the execution is started after the
claim, with the run's token in its environment (RUN_ID, FENCE, SCHEDULE_TIME, SCHEDULER_JOB),
so its container can check them (check_idempotency_token) before it changes state.

The Cloud Run Admin API takes no client-chosen execution id, so a lost answer is handled by
looking first: before starting, the job lists the executions of its Cloud Run job (newest
first, back to shortly before the schedule time) and reuses the one whose RUN_ID is this run's,
started by an attempt whose answer was lost. What remains is a `jobs.run` the API accepts but
has not made visible when the next attempt lists (docs/proxy.md); the container's token check
covers it. Every call is made once, its timeout cut to what the attempt has left
(exactly_once/targets/call_timeout.py).

The run records the execution's name and state (exactly_once/ledger/downstream.py): running
when just started, the found execution's own state when an earlier attempt started it.
`execution_state` asks for it again afterwards, for whoever follows the run's execution to its
end (exactly_once/delivery/following.py).

Settings: CLOUD_RUN_JOBS (JSON, set by the stack; exactly_once/targets/cloud_run_job_spec.py), keyed by
the scheduled job's id. The request body must be empty. CLOUD_RUN_API_ENDPOINT (optional)
overrides the endpoint (exactly_once/endpoints.py); the client speaks REST.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from google.auth.credentials import AnonymousCredentials

from exactly_once import RetryableJobError, RunContext, TerminalJobError, log_fields, structured_log
from exactly_once.delivery.following import register_follower
from exactly_once.endpoints import CLOUD_RUN_ENDPOINT_ENV, ApiEndpoint, endpoint_from_env
from exactly_once.ledger.downstream import Downstream, DownstreamState
from exactly_once.once import OncePerInstance
from exactly_once.run_key import format_rfc3339
from exactly_once.targets.call_timeout import CALL_TIMEOUT_SECONDS, call_timeout
from exactly_once.targets.cloud_run_job_spec import (
    CLOUD_RUN_JOBS_ENV,
    FENCE_ENV,
    RUN_ID_ENV,
    SCHEDULE_TIME_ENV,
    SCHEDULER_JOB_ENV,
    CloudRunJobSpec,
)
from exactly_once.targets.errors import downstream_call
from exactly_once.targets.job_tables import read_table

# The kind of work this proxy starts, as the stack's config names the target: what its runs'
# records say they started, and what its follower is registered under.
CLOUD_RUN_JOB: Final = "cloudRunJob"

if TYPE_CHECKING:
    # Imported by the first run, not at start-up: the router imports every configured job's
    # module when the instance starts, and most of its requests are not runs of this job.
    from google.cloud import run_v2

# The search for an execution of this run: Cloud Run keeps a job's newest 1000 executions, so
# ten pages of 100 reach every one it still has; the search stops at the first execution
# created this long before the schedule time (Cloud Run's and Cloud Scheduler's clocks are
# Google's; the margin is for their differences, not for the instance's clock). All its pages
# together get one call's time: a search that cannot finish in it releases the run rather
# than start an execution without having looked.
LIST_PAGE_SIZE = 100
MAX_LIST_PAGES = 10
CREATED_BEFORE_SCHEDULE_MARGIN = timedelta(minutes=10)
SEARCH_SECONDS = CALL_TIMEOUT_SECONDS

SPECS = read_table(os.environ, CLOUD_RUN_JOBS_ENV, CloudRunJobSpec.from_json)
ENDPOINT = endpoint_from_env(os.environ, CLOUD_RUN_ENDPOINT_ENV)

# The timeout of a call, asked for just before it is made (exactly_once/targets/call_timeout.py).
Timeout = Callable[[], float]


def _new_clients(endpoint: ApiEndpoint) -> tuple[run_v2.JobsClient, run_v2.ExecutionsClient]:
    from google.cloud import run_v2

    options = {"api_endpoint": endpoint.url} if endpoint.url else None
    # Plaintext means a loopback fake (endpoints.py refuses anything else): no credentials.
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    credentials = anonymous if endpoint.plaintext else None
    return (
        run_v2.JobsClient(transport="rest", client_options=options, credentials=credentials),
        run_v2.ExecutionsClient(transport="rest", client_options=options, credentials=credentials),
    )


# Built on first use, then shared by every request of the instance (see exactly_once/once.py).
_clients = OncePerInstance(lambda: _new_clients(ENDPOINT))


def run_cloud_run_job(context: RunContext) -> dict[str, object]:
    """The job handler (`jobs.cloud_run_job:run_cloud_run_job`): the run's execution, found or
    started; its name is the run's output, so a duplicate delivery's answer carries it."""
    spec = SPECS.get(context.job_name)
    if spec is None:
        raise TerminalJobError(f"job {context.job_name!r} has no entry in {CLOUD_RUN_JOBS_ENV}")
    context.json_body(allowed_fields=())  # the settings come from the stack, never the body
    searching = f"listing the executions of {spec.job}"
    # Before the client library is imported (a first run's import can outlast a short limit):
    # an attempt with no time for a call releases its run at once.
    call_timeout(context, searching)
    from google.cloud import run_v2

    jobs, executions = _clients()
    not_before = context.schedule_time - CREATED_BEFORE_SCHEDULE_MARGIN
    search_ends_at = time.monotonic() + SEARCH_SECONDS
    with downstream_call(searching):
        found_execution = execution_of_run(
            executions,
            spec.job,
            context.run_id,
            not_before,
            lambda: call_timeout(context, searching, step_ends_at=search_ends_at),
        )
    if found_execution is not None:
        found = str(found_execution.name)
        context.downstream.started(_followed(found, found_execution))
        _log(context, spec.job, found, "found the execution an earlier attempt started")
        return {"execution": found, "reused": True}
    running = f"running {spec.job}"
    with downstream_call(running):
        operation = jobs.run_job(
            request=run_v2.RunJobRequest(name=spec.job, overrides=overrides(spec, context)),
            retry=None,
            timeout=call_timeout(context, running),
        )
        started = operation.metadata
    name = getattr(started, "name", "")
    if not name:
        # Accepted but unnamed: the next attempt finds the execution by its RUN_ID.
        raise RetryableJobError(f"{running}: the answer named no execution")
    context.downstream.started(_followed(name, started if isinstance(started, run_v2.Execution) else None))
    _log(context, spec.job, name, "started a Cloud Run job execution")
    return {"execution": name, "reused": False}


def overrides(spec: CloudRunJobSpec, context: RunContext) -> run_v2.RunJobRequest.Overrides:
    """The job's configured overrides plus the run's token: what the container reads."""
    from google.cloud import run_v2

    run_env = {
        RUN_ID_ENV: context.run_id,
        FENCE_ENV: str(context.fence),
        SCHEDULE_TIME_ENV: format_rfc3339(context.schedule_time),
        SCHEDULER_JOB_ENV: context.job_name,
    }
    env = [run_v2.EnvVar(name=k, value=v) for k, v in {**spec.env, **run_env}.items()]
    container = run_v2.RunJobRequest.Overrides.ContainerOverride(
        env=env,
        args=list(spec.args or ()),
        # An empty list means "keep the job's args" unless this is set.
        clear_args=spec.args is not None and not spec.args,
    )
    result = run_v2.RunJobRequest.Overrides(container_overrides=[container])
    if spec.task_count is not None:
        result.task_count = spec.task_count
    if spec.timeout_seconds is not None:
        result.timeout = timedelta(seconds=spec.timeout_seconds)
    return result


def execution_of_run(
    client: run_v2.ExecutionsClient, job: str, run_id: str, not_before: datetime, timeout: Timeout
) -> run_v2.Execution | None:
    """`job`'s execution whose RUN_ID is `run_id`, deleted ones included (it ran),
    searched newest first down to `not_before`; None when there is none. Page by page, each
    call with its own `timeout()` (the library's pager would give every page the first's)."""
    from google.cloud import run_v2

    request = run_v2.ListExecutionsRequest(parent=job, page_size=LIST_PAGE_SIZE, show_deleted=True)
    for _ in range(MAX_LIST_PAGES):
        pager = client.list_executions(request=request, retry=None, timeout=timeout())
        page = next(iter(pager.pages))  # the answer just received: no further call
        for execution in page.executions:
            if run_id in _run_ids(execution):
                return execution
            created = execution.create_time
            if created is not None and created.year > 1970 and created < not_before:
                return None
        if not page.next_page_token:
            return None
        request.page_token = page.next_page_token
    return None


def execution_state(known: Downstream, timeout: float) -> Downstream:
    """The execution `known` names, as the Cloud Run Admin API reports it now: the follower
    of CLOUD_RUN_JOB work (exactly_once/delivery/following.py). One call, no retry."""
    _, executions = _clients()
    return _followed(known.name, executions.get_execution(name=known.name, retry=None, timeout=timeout))


def _followed(name: str, execution: run_v2.Execution | None) -> Downstream:
    state, error = execution_outcome(execution) if execution is not None else (DownstreamState.RUNNING, None)
    return Downstream(CLOUD_RUN_JOB, name, state, error)


def execution_outcome(execution: run_v2.Execution) -> tuple[DownstreamState, str | None]:
    """An execution's state, with the API's words when it failed: its Completed condition
    says whether it ended and how; an execution with cancelled tasks that ended was
    cancelled. Without that condition (an execution just created), it runs until Cloud Run
    sets a completion time."""
    from google.cloud import run_v2

    completed = next((c for c in execution.conditions if c.type_ == "Completed"), None)
    ended_at = execution.completion_time
    ended = ended_at is not None and ended_at.year > 1970
    if completed is not None and completed.state == run_v2.Condition.State.CONDITION_SUCCEEDED:
        return DownstreamState.SUCCEEDED, None
    failed = completed is not None and completed.state == run_v2.Condition.State.CONDITION_FAILED
    if not failed and not ended:
        return DownstreamState.RUNNING, None
    message = (completed.message if completed is not None else "") or None
    if execution.cancelled_count:
        return DownstreamState.CANCELLED, message or f"{execution.cancelled_count} task(s) cancelled"
    if failed or execution.failed_count:
        return DownstreamState.FAILED, message or f"{execution.failed_count} task(s) failed"
    return DownstreamState.SUCCEEDED, None


def _run_ids(execution: run_v2.Execution) -> Iterable[str]:
    return (
        env.value
        for container in execution.template.containers
        for env in container.env
        if env.name == RUN_ID_ENV
    )


def _log(context: RunContext, job: str, execution: str, message: str) -> None:
    fields = {
        "cloud_run_job": job,
        "execution": execution,
        log_fields.RUN_ID: context.run_id,
        log_fields.JOB: context.job_name,
        "attempt_id": context.attempt_id,
        "fence": context.fence,
    }
    structured_log.emit("INFO", message, fields)


register_follower(CLOUD_RUN_JOB, execution_state)
