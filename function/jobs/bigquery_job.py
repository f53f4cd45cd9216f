"""Proxy job: one BigQuery query job per scheduled run, under an id derived from the run.

BigQuery takes a client-chosen job id and refuses a second job with an id it has already seen
in the project (HTTP 409). The job id here is the scheduled job's name and the run id
(exactly_once/targets/bigquery_job_spec.py: bigquery_job_id), the same on every delivery of the run:
when an answer is lost and the run is retried, the retry's insert is refused and the job reads
the one that exists instead, reporting its state. One job per run, whatever is lost, and
nothing is asked of the query.

The query may read the run through named parameters: @run_id (STRING), @schedule_time
(TIMESTAMP) and @job_name (STRING), each passed only when the query names it.

Settings: BIGQUERY_JOBS (JSON, set by the stack), keyed by the scheduled job's id. The request
body must be empty. BIGQUERY_API_ENDPOINT (optional) overrides the endpoint
(exactly_once/endpoints.py). Every call is made once, its timeout cut to what the
attempt has left (exactly_once/targets/call_timeout.py).

The run records the job's name and state (exactly_once/ledger/downstream.py): a query job
usually outlasts the call that starts it. `job_state` asks for it again afterwards, for
whoever follows the run's job to its end (exactly_once/delivery/following.py).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Final

from google.api_core import exceptions as google_exceptions
from google.api_core.retry import Retry
from google.auth.credentials import AnonymousCredentials

from exactly_once import RetryableJobError, RunContext, TerminalJobError, log_fields, structured_log
from exactly_once.delivery.following import register_follower
from exactly_once.endpoints import BIGQUERY_ENDPOINT_ENV, ApiEndpoint, endpoint_from_env
from exactly_once.ledger.downstream import Downstream, DownstreamState
from exactly_once.once import OncePerInstance
from exactly_once.targets.bigquery_job_spec import BIGQUERY_JOBS_ENV, BigQueryJobSpec, bigquery_job_id
from exactly_once.targets.call_timeout import call_timeout
from exactly_once.targets.errors import downstream_call
from exactly_once.targets.job_tables import read_table

# The kind of work this proxy starts, as the stack's config names the target: what its runs'
# records say they started, and what its follower is registered under.
BIGQUERY: Final = "bigquery"

if TYPE_CHECKING:
    # Imported by the first run, not at start-up: the router imports every configured job's
    # module when the instance starts, and most of its requests are not runs of this job.
    from google.cloud import bigquery

# Each call once, no client-side retry: a retry is a new delivery, and it finds the job.
NO_RETRY = Retry(predicate=lambda _: False)
_PARAMETER = re.compile(r"@(run_id|schedule_time|job_name)\b")

SPECS = read_table(os.environ, BIGQUERY_JOBS_ENV, BigQueryJobSpec.from_json)
ENDPOINT = endpoint_from_env(os.environ, BIGQUERY_ENDPOINT_ENV)


def _new_client(endpoint: ApiEndpoint) -> bigquery.Client:
    from google.cloud import bigquery

    options = {"api_endpoint": endpoint.url} if endpoint.url else None
    # Plaintext means a loopback fake (endpoints.py refuses anything else): no credentials.
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    credentials = anonymous if endpoint.plaintext else None
    project = os.environ.get("GOOGLE_CLOUD_PROJECT") or None
    return bigquery.Client(project=project, credentials=credentials, client_options=options)


# Built on first use, then shared by every request of the instance (see exactly_once/once.py).
_client = OncePerInstance(lambda: _new_client(ENDPOINT))


def run_bigquery_job(context: RunContext) -> dict[str, object]:
    """The job handler (`jobs.bigquery_job:run_bigquery_job`): the run's query job, started or
    found; its name and state are the run's output."""
    spec = SPECS.get(context.job_name)
    if spec is None:
        raise TerminalJobError(f"job {context.job_name!r} has no entry in {BIGQUERY_JOBS_ENV}")
    context.json_body(allowed_fields=())  # the query comes from the stack, never the body
    job_id = bigquery_job_id(context.job_name, context.run_id)
    starting = f"starting BigQuery job {job_id}"
    # Before the client is made (a first run imports its library, which can outlast a short
    # limit): an attempt with no time for a call releases its run at once.
    call_timeout(context, starting)
    client = _client()
    reused = False
    with downstream_call(starting):
        try:
            job = client.query(
                spec.query,
                job_config=job_config(spec, context),
                job_id=job_id,
                location=spec.location,
                project=spec.project,
                retry=NO_RETRY,
                job_retry=None,
                timeout=call_timeout(context, starting),
            )
        except google_exceptions.Conflict:
            job, reused = _existing_job(client, spec, job_id, context), True
    name = f"{spec.project}:{spec.location}.{job_id}"
    if job.state == "DONE" and job.error_result:
        # The id is taken for good: running the run again would find this same failed job.
        reason = job.error_result.get("reason", "error")
        raise TerminalJobError(f"BigQuery job {name} failed: {reason}: {job.error_result.get('message', '')}")
    context.downstream.started(_followed(name, job))
    _log(context, name, job.state, reused)
    return {"job": name, "state": job.state, "reused": reused}


def job_state(known: Downstream, timeout: float) -> Downstream:
    """The job `known` names ("project:location.job_id", as the run's output names it), as
    the BigQuery API reports it now: the follower of BIGQUERY work
    (exactly_once/delivery/following.py). One call, no retry."""
    project, _, rest = known.name.partition(":")
    location, _, job_id = rest.partition(".")
    job = _client().get_job(job_id, project=project, location=location, retry=NO_RETRY, timeout=timeout)
    return _followed(known.name, job)


def _followed(name: str, job: Any) -> Downstream:
    """A job's state: done with an error result failed (or was cancelled: BigQuery's reason
    `stopped`), done without one succeeded, anything else is still running."""
    if job.state != "DONE":
        return Downstream(BIGQUERY, name, DownstreamState.RUNNING)
    error = job.error_result
    if not error:
        return Downstream(BIGQUERY, name, DownstreamState.SUCCEEDED)
    state = DownstreamState.CANCELLED if error.get("reason") == "stopped" else DownstreamState.FAILED
    return Downstream(BIGQUERY, name, state, f"{error.get('reason', 'error')}: {error.get('message', '')}")


def _existing_job(
    client: bigquery.Client, spec: BigQueryJobSpec, job_id: str, context: RunContext
) -> bigquery.QueryJob:
    """The job an earlier delivery of the run started (its answer was lost)."""
    from google.cloud import bigquery

    reading = f"reading BigQuery job {job_id}"
    try:
        job = client.get_job(
            job_id,
            project=spec.project,
            location=spec.location,
            retry=NO_RETRY,
            timeout=call_timeout(context, reading),
        )
    except google_exceptions.NotFound as error:
        # BigQuery can answer 404 for a moment after refusing the id as taken.
        raise RetryableJobError(f"BigQuery job {job_id} exists (409) but is not readable yet") from error
    if not isinstance(job, bigquery.QueryJob):
        raise TerminalJobError(f"BigQuery job {job_id} exists and is a {type(job).__name__}, not a query")
    return job


def job_config(spec: BigQueryJobSpec, context: RunContext) -> bigquery.QueryJobConfig:
    from google.cloud import bigquery

    config = bigquery.QueryJobConfig(use_legacy_sql=False, labels=dict(spec.labels))
    named = set(_PARAMETER.findall(spec.query))
    parameters = {
        "run_id": bigquery.ScalarQueryParameter("run_id", "STRING", context.run_id),
        "schedule_time": bigquery.ScalarQueryParameter("schedule_time", "TIMESTAMP", context.schedule_time),
        "job_name": bigquery.ScalarQueryParameter("job_name", "STRING", context.job_name),
    }
    config.query_parameters = [parameter for name, parameter in parameters.items() if name in named]
    if spec.destination_table is not None:
        config.destination = spec.destination_table
    if spec.write_disposition is not None:
        config.write_disposition = spec.write_disposition
    return config


def _log(context: RunContext, job: str, state: str | None, reused: bool) -> None:
    fields = {
        "bigquery_job": job,
        "state": state,
        "reused": reused,
        log_fields.RUN_ID: context.run_id,
        log_fields.JOB: context.job_name,
        "attempt_id": context.attempt_id,
    }
    message = "found the BigQuery job an earlier attempt started" if reused else "started a BigQuery job"
    structured_log.emit("INFO", message, fields)


register_follower(BIGQUERY, job_state)
