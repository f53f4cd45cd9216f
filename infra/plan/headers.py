"""The headers every delivery of a job carries: Cloud Scheduler's own and the HttpTarget's.

The run id is computed from them (project, location, job name, schedule time), so the local
scheduler, `ops backfill` and the tests deliver with exactly these, and a run id computed
locally matches the one computed in the cloud.
"""

from __future__ import annotations

from datetime import datetime

from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    format_rfc3339,
)
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.targets.registry import kind_of


def headers_for(settings: StackSettings, job: JobSettings) -> dict[str, str]:
    """HttpTarget headers of `job`. The local scheduler sends these same headers, so a run id
    computed locally matches the one computed in the cloud; a stack's second region sends them
    too (the same location), so both regions' deliveries of a run are one run."""
    headers = {PROJECT_HEADER: settings.project, LOCATION_HEADER: settings.run_location}
    if job.body is not None or (job.target is not None and kind_of(job.target).sends_body):
        headers["Content-Type"] = "application/json"
    return headers


def run_headers(settings: StackSettings, job: JobSettings) -> dict[str, str]:
    """What every delivery of `job` carries whatever its run: the deployed job id and the
    HttpTarget headers; the missed-run audit's catch-up adds each run's schedule time."""
    return {JOB_NAME_HEADER: settings.scheduler_job_id(job), **headers_for(settings, job)}


def delivery_headers(settings: StackSettings, job: JobSettings, schedule_time: datetime) -> dict[str, str]:
    """Every header Cloud Scheduler sends with a delivery of `job`'s run at `schedule_time`:
    the deployed job id, the schedule time (the same on every retry) and the HttpTarget
    headers. The local scheduler, `ops backfill` and the tests deliver with these."""
    return {**run_headers(settings, job), SCHEDULE_TIME_HEADER: format_rfc3339(schedule_time)}
