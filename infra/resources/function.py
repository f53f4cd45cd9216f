"""The deduplicating function itself: the Cloud Run function every scheduled job calls, the
moments from which the missed-run audit expects each job's runs, and what every function of
the stack shares: how it is replaced, and how its URI and service are read.

Its arguments are the stack's decisions about one resource, kept in one call so a fork that
changes one of them (memory, concurrency, ingress) changes it in one place.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_gcp as gcp
import pulumiverse_time

from exactly_once.delivery.scheduler_request import parse_rfc3339
from infra.plan.audit_job import audit_config
from infra.plan.catchup import FUNCTION_ROLE, catches_up, redeliveries
from infra.resources.build import BuildIdentity
from infra.resources.propagation import SECRET_GRANTS, pause_after
from infra.resources.runtime_access import secret_environment_variables
from infra.settings.environment import function_environment, job_table
from infra.settings.stack import StackSettings

FUNCTION_ENTRY_POINT = "handle_scheduled_job"

# How long after a job enters the stack its first run is expected: room for the function's
# build and the IAM propagation pauses before its Cloud Scheduler job exists.
AUDIT_DEPLOY_MARGIN_MINUTES = 30


def audit_horizons(
    name: str, settings: StackSettings, *, parent: pulumi.Resource
) -> dict[str, pulumi.Input[str]]:
    """Per job, the moment from which the missed-run audit expects its runs: when the job
    first entered the stack, plus a margin for the deploy itself (the build, the IAM
    propagation pauses) before its Cloud Scheduler job exists. Recorded once in the state,
    so later deploys keep it; without it every new job's first audit would report the runs
    scheduled before the job existed. Keyed, and named in the state, by the job's run key
    (JobSettings.key_name), so a job renamed with its runKey kept keeps its horizon: the runs
    before the rename stay due, and caught up."""
    if not settings.missed_run_audit:
        return {}
    return {
        job.key_name: pulumiverse_time.Offset(
            f"{name}-audit-from-{job.key_name}",
            offset_minutes=AUDIT_DEPLOY_MARGIN_MINUTES,
            opts=pulumi.ResourceOptions(parent=parent),
        ).rfc3339
        for job in settings.jobs
    }


def pause_changes(
    name: str, settings: StackSettings, *, parent: pulumi.Resource
) -> dict[str, pulumi.Input[str]]:
    """Per job whose config sets `paused` (true or false), when that key last changed: a time
    replaced whenever the flag flips, so the audit knows when the job's pause began, or ended
    (exactly_once/audit/pauses.py). It is taken before the function and the Scheduler job are
    updated; the audit allows the deploy's margin after a resume. Keyed by run key, like
    audit_horizons: a rename that keeps it is no change of the pause."""
    if not settings.missed_run_audit:
        return {}
    return {
        job.key_name: pulumiverse_time.Static(
            f"{name}-pause-{job.key_name}",
            triggers={"paused": "true" if job.paused else "false"},
            opts=pulumi.ResourceOptions(parent=parent),
        ).rfc3339
        for job in settings.jobs
        if job.pause_recorded
    }


def function_options(opts: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
    """`opts` for a function of the stack. Its name is fixed
    (policy/scheduler_guardrails/rules/config/names.py), so a
    replacement that creates the new function before deleting the old one always meets 409
    "already exists": the old one goes first. That also makes `pulumi up --replace <urn>` the
    repair of a function whose build failed (docs/deploy.md, "A failed build")."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(delete_before_replace=True))


def function_uri(function: gcp.cloudfunctionsv2.Function) -> pulumi.Output[str]:
    """The function's Cloud Run URI, or an error that names the repair when it has none."""
    return _served(function, "uri", "service URI")


def function_service(function: gcp.cloudfunctionsv2.Function) -> pulumi.Output[str]:
    """The function's Cloud Run service (`projects/.../services/<name>`), or an error that
    names the repair when it has none."""
    return _served(function, "service", "Cloud Run service")


def _served(function: gcp.cloudfunctionsv2.Function, field: str, shown: str) -> pulumi.Output[str]:
    """A function whose first build failed is stored FAILED, with no URI and no service, and an
    unchanged program sends no request to fix it: every later `pulumi up` would fail here
    with nothing to act on. The message says what does fix it. (In a first preview the value
    is unknown, and this never runs.)"""

    def read(values: list[object]) -> str:
        urn, value = values
        if not value:
            raise FunctionNotServingError(
                f"the function {urn} reports no {shown}: its last build or deploy failed, and an "
                f"unchanged `pulumi up` does not retry it. Rebuild it with `pulumi up --replace '{urn}'` "
                '(docs/deploy.md, "A failed build").'
            )
        return str(value)

    value = function.service_config.apply(lambda config: getattr(config, field, None) if config else None)
    return pulumi.Output.all(function.urn, value).apply(read)


class FunctionNotServingError(pulumi.RunError):
    """A function of the stack has no URI or service: its last build failed."""


def dedup_function(
    name: str,
    settings: StackSettings,
    *,
    parent: pulumi.Resource,
    opts: pulumi.ResourceOptions,
    build: BuildIdentity,
    runtime_account: gcp.serviceaccount.Account,
    access: list[pulumi.Resource],
    region: str | None = None,
) -> gcp.cloudfunctionsv2.Function:
    """The function in `region` (None: the stack's first), named `name`-function. Every region's
    function has the same name, build, account and environment (but for the region it names,
    which picks its catch-up queue, infra/plan/catchup.py): it records the runs it claims
    as its service's, and the runs of both regions must be one service's (a run recorded by
    another target is refused). `opts` carries the parent and what the build needs first; the
    runtime's secret grants are waited for here, since only a function with secrets has them."""
    location = region or settings.region
    secrets = secret_environment_variables(settings)
    if secrets:
        # Cloud Run checks that the runtime account may read each secret when it deploys
        # the revision: the grants must be in effect first (infra/resources/propagation.py). A secret
        # added later is a new grant, so the secrets are triggers too.
        referenced = sorted({f"{secret['project_id']}/{secret['secret']}" for secret in secrets})
        ready = pause_after(
            name,
            SECRET_GRANTS,
            after=access,
            triggers={"runtime": runtime_account.member, "secrets": " ".join(referenced)},
            opts=pulumi.ResourceOptions(parent=parent),
        )
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[ready]))
    return gcp.cloudfunctionsv2.Function(
        f"{name}-function",
        project=settings.project,
        location=location,
        name=settings.names.function_name(FUNCTION_ROLE),
        description="Deduplicates Cloud Scheduler deliveries: each scheduled run executes once.",
        build_config=build.config(FUNCTION_ENTRY_POINT, location),
        service_config={
            "service_account_email": runtime_account.email,
            "timeout_seconds": int(settings.function_timeout_seconds),
            "max_instance_count": settings.max_instances,
            # One request per instance: the watchdog that ends an overrunning attempt
            # ends its instance's process, and must take no other run with it.
            "max_instance_request_concurrency": 1,
            "ingress_settings": settings.ingress,
            "all_traffic_on_latest_revision": True,
            # What is per deployment; what is per job ships in the source (job_table_text).
            "environment_variables": function_environment(settings, location),
            "secret_environment_variables": secrets or None,
        },
        opts=function_options(opts),
    )


def job_table_text(
    settings: StackSettings,
    created_at: Mapping[str, pulumi.Input[str]] | None = None,
    invoker_email: pulumi.Input[str] | None = None,
    pause_changed: Mapping[str, pulumi.Input[str]] | None = None,
    queues: Mapping[str, pulumi.Input[str]] | None = None,
) -> pulumi.Output[str]:
    """The job table the function's source ships (exactly_once.config.JobTable), with the
    audit's configuration. `created_at` maps run key names (JobSettings.key_name: config job
    names unless a job sets runKey) to when each job was created
    (RFC 3339, e.g. a `pulumiverse_time.Static` per job), so the audit never reports runs
    scheduled before a job existed; `pause_changed` to when a job's `paused` key last changed
    (pause_changes). `invoker_email`, the account catch-up deliveries sign as, and `queues`,
    each region's catch-up queue by its full name (CatchupQueue.paths), are needed when a job
    has a `catchup` policy (infra/plan/catchup.py). No audit without the audit job
    (`missedRunAudit: false`)."""
    if not settings.missed_run_audit:
        return pulumi.Output.from_input(job_table(settings).to_json())
    if catches_up(settings) and (invoker_email is None or queues is None):
        raise ValueError(
            "a job catches up: the audit needs the invoker account its deliveries sign as, and the queues"
        )
    # One named input per value the table waits for: the invoker, each region's queue, and
    # per run key its creation and its last pause change.
    inputs: dict[str, pulumi.Input[str]] = {
        **({"invoker": invoker_email} if invoker_email is not None else {}),
        **{f"queue:{region}": path for region, path in (queues or {}).items()},
        **{f"created:{key}": time for key, time in (created_at or {}).items()},
        **{f"paused:{key}": time for key, time in (pause_changed or {}).items()},
    }

    def render(values: dict[str, str]) -> str:
        def part(kind: str) -> dict[str, str]:
            return {
                key.split(":", 1)[1]: value for key, value in values.items() if key.startswith(f"{kind}:")
            }

        deployed = {key: parse_rfc3339(time) for key, time in part("created").items()}
        paused = {key: parse_rfc3339(time) for key, time in part("paused").items()}
        paths, email = part("queue"), values.get("invoker")
        resend = redeliveries(settings, email, paths) if paths and email is not None else None
        return job_table(settings, audit_config(settings, deployed, resend, paused)).to_json()

    if not inputs:
        return pulumi.Output.from_input(job_table(settings, audit_config(settings)).to_json())
    return pulumi.Output.all(**inputs).apply(render)
