"""One Cloud Scheduler job per configured job: unix-cron, OIDC-authenticated POST to the function."""

from __future__ import annotations

import base64

import pulumi
import pulumi_gcp as gcp

from infra.plan.headers import headers_for
from infra.resources.durations import duration
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings


def scheduler_job(
    prefix: str,
    job: JobSettings,
    settings: StackSettings,
    function_uri: pulumi.Output[str],
    invoker_email: pulumi.Output[str],
    opts: pulumi.ResourceOptions,
    sample_workflow: pulumi.Output[str] | None = None,
    region: str | None = None,
) -> gcp.cloudscheduler.Job:
    """The job `job` of this stack in `region` (None: the stack's first), named by its deployed
    id (unique per stack), which Cloud Scheduler sends as X-CloudScheduler-JobName. A second
    region's job has the same id, headers and body, and calls that region's function: its
    deliveries are the same runs as the first region's, which the ledger runs once.

    A job with a sample workflow names it in its body, which is therefore an Output.
    """
    retry = job.retry
    body: pulumi.Input[str] | None
    if sample_workflow is not None:
        body = sample_workflow.apply(lambda workflow: _encoded(job.body_bytes(workflow)))
    else:
        raw = job.body_bytes()
        body = _encoded(raw) if raw is not None else None
    return gcp.cloudscheduler.Job(
        f"{prefix}-job-{job.name}",
        project=settings.project,
        region=region or settings.region,
        name=settings.scheduler_job_id(job),
        description=f"Exactly-once scheduled job {job.name} of stack {settings.stack}",
        schedule=job.schedule,
        time_zone=job.time_zone,
        # Always explicit: left unset, a job paused by hand would stay paused and one the
        # config pauses could be resumed by hand without the stack noticing.
        paused=job.paused,
        attempt_deadline=duration(job.attempt_deadline_seconds),
        retry_config={
            "retry_count": retry.retry_count,
            "max_retry_duration": duration(retry.max_retry_duration_seconds),
            "min_backoff_duration": duration(retry.min_backoff_seconds),
            "max_backoff_duration": duration(retry.max_backoff_seconds),
            "max_doublings": retry.max_doublings,
        },
        http_target={
            "http_method": "POST",
            "uri": function_uri,
            "headers": headers_for(settings, job),
            "body": body,
            "oidc_token": {"service_account_email": invoker_email, "audience": function_uri},
        },
        opts=opts,
    )


def _encoded(body: bytes | None) -> str:
    """The body as the Cloud Scheduler API takes it: base64."""
    if body is None:
        raise ValueError("a job with a sample workflow has a body once the workflow is named")
    return base64.b64encode(body).decode()
