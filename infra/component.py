"""The whole deduplicated-scheduled-job stack as one Pulumi ComponentResource.

Read top to bottom, `ExactlyOnceScheduler.__init__` is the architecture: APIs (and a pause
until they serve, which also refuses a changed region), the Firestore ledger, the identities,
the source and its build, the function, the invoker binding, the jobs
(the configured ones and the missed-run audit), and the monitoring that watches them.
With `secondRegion`, the function, its invoker grant and every job are deployed in both regions
(infra/resources/regions.py names the second set); everything else is deployed once.
One private method per part; the larger parts live in their own modules (infra/resources/build.py,
infra/resources/function.py, infra/resources/scheduler_jobs.py, ...). Each
resource keeps all of its arguments in one call so a fork can change one thing in one place.

Every name the component chooses comes from policy/scheduler_guardrails/rules/config/names.py and starts with
the component's
own name and the stack's: several stacks, and several components of one stack (each under a name
of its own), share a project without colliding. `__main__.py` names its one component
COMPONENT_NAME, the name the local tools (`ops`, `make demo`) compute every id with.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

import infra
from infra.config.schema import FUNCTION_DIR
from infra.monitoring.operations import declare_operations
from infra.plan.audit_job import with_audit_job
from infra.plan.needs import extra_apis
from infra.plan.outputs import outputs_of
from infra.resources.build import BuildIdentity, build_identity, function_source
from infra.resources.catchup_queue import catchup_queue
from infra.resources.function import (
    audit_horizons,
    dedup_function,
    function_service,
    function_uri,
    job_table_text,
    pause_changes,
)
from infra.resources.identities import Identities, run_invoker
from infra.resources.identities import identities as make_identities
from infra.resources.labels import labelling
from infra.resources.last_update import checked_region
from infra.resources.ledger import LedgerDatabase, ledger_database
from infra.resources.propagation import API_ACTIVATION, SERVING_GRANTS, pause_after
from infra.resources.regions import regional_prefix
from infra.resources.runtime_access import runtime_access
from infra.resources.sample_seam import (
    NO_SAMPLES,
    CallingSamples,
    GrantedSamples,
    SampleContext,
    SampleDeployer,
)
from infra.resources.scheduler_jobs import scheduler_job
from infra.settings.stack import StackSettings
from infra.settings.timing_checks import timing_advisories
from policy.scheduler_guardrails.rules.config.grants import INVOKER_CALLS_FUNCTION
from policy.scheduler_guardrails.rules.config.names import StackNames

# The room of the samples and the token check they call (infra/README.md).
SAMPLES_ROOM = "samples"
COMPONENT_TYPE = "exactly-once-scheduler:index:ExactlyOnceScheduler"
# What a function deployment needs enabled before it starts.
FUNCTION_APIS = (
    "cloudfunctions.googleapis.com",
    "cloudbuild.googleapis.com",
    "artifactregistry.googleapis.com",
    "run.googleapis.com",
)

# Everything a first deploy on a fresh project uses; never disabled on destroy, since other
# workloads (and other stacks in the project) may need them.
REQUIRED_APIS = (
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
)

_Apis = Mapping[str, gcp.projects.Service]


@dataclass(frozen=True)
class ExactlyOnceSchedulerArgs:
    """What one component deploys: a stack's validated settings (infra/settings/), and the
    folder its function's source is built from."""

    settings: StackSettings
    function_dir: Path = FUNCTION_DIR


class ExactlyOnceScheduler(pulumi.ComponentResource):
    """Cloud Scheduler jobs → private Cloud Run function → Firestore run ledger."""

    function_uri: pulumi.Output[str]
    job_names: pulumi.Output[list[str]]
    runtime_service_account_email: pulumi.Output[str]
    invoker_service_account_email: pulumi.Output[str]
    build_service_account_email: pulumi.Output[str]
    database_name: pulumi.Output[str]
    runs_collection: pulumi.Output[str]
    region: pulumi.Output[str]
    # Only with a sample workflow (else None / {}): the token check and the workflows.
    token_check_uri: pulumi.Output[str] | None
    token_check_service_account_email: pulumi.Output[str] | None
    workflow_service_account_email: pulumi.Output[str] | None
    sample_workflows: pulumi.Output[dict[str, str]]
    # Only when a job catches up (else None): the first region's catch-up queue, by its full name.
    catchup_queue: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: ExactlyOnceSchedulerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # `name` starts the logical name of every child and every name the component chooses:
        # the children's URNs are `<name>-...` as they always were, so a stack deployed before
        # the name was a parameter keeps every resource under the name it had, COMPONENT_NAME.
        try:
            StackNames(args.settings.stack, name)
        except ValueError as error:
            raise pulumi.RunError(f"ExactlyOnceScheduler {name!r}: {error}") from error
        # The missed-run audit is one more scheduled job of the stack (infra/plan/audit_job.py).
        settings = with_audit_job(dataclasses.replace(args.settings, component=name))
        function_dir = args.function_dir
        # Every resource below that can carry labels carries the stack's (infra/resources/labels.py).
        labelled = pulumi.ResourceOptions(transformations=[labelling(settings.resource_labels)])
        super().__init__(COMPONENT_TYPE, name, None, pulumi.ResourceOptions.merge(opts, labelled))
        for advisory in timing_advisories(settings):
            pulumi.log.warn(advisory, resource=self)

        apis = self._enable_apis(name, settings)
        # What the stack creates in its region waits for this: the APIs serving, the region checked.
        ready = self._apis_serving(name, settings, apis)
        ledger = ledger_database(name, settings, parent=self, firestore_api=ready)
        identities = make_identities(name, settings, parent=self, iam_api=ready)
        audit_from = audit_horizons(name, settings, parent=self)
        pause_changed = pause_changes(name, settings, parent=self)
        # Only when a job catches up: the queue the audit delivers missed runs through, which
        # the job table names.
        queue = catchup_queue(
            name,
            settings,
            runtime_account=identities.runtime,
            invoker_account=identities.invoker,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ready]),
        )
        queues = queue.paths(settings) if queue else None
        table = job_table_text(settings, audit_from, identities.invoker.email, pause_changed, queues)
        build = self._build(name, settings, apis, ready, function_dir, table)
        # The token check and the samples the runtime account is granted on, when the stack has them.
        context = SampleContext(
            name, settings, self, apis, ready, ledger, identities, build, self._function_opts(apis, build)
        )
        deployer = sample_deployer()
        targets = deployer.granted(context)
        access = self._runtime_access(name, settings, apis, identities.runtime, targets)
        # The function every scheduled job calls, in each region (infra/resources/regions.py);
        # its first build needs the builder's grants.
        functions = {
            region: dedup_function(
                regional_prefix(name, settings, region),
                settings,
                parent=self,
                opts=self._function_opts(apis, build),
                build=build,
                runtime_account=identities.runtime,
                access=access,
                region=region,
            )
            for region in settings.regions
        }
        uris = {region: function_uri(function) for region, function in functions.items()}
        invoker_bindings = [
            self._invoker_binding(name, settings, function, identities.invoker, region)
            for region, function in functions.items()
        ]
        samples = deployer.calling(context, targets)
        serving = self._serving_grants_propagation(
            name,
            identities,
            [*invoker_bindings, *access, *targets.grants, *(queue.grants if queue else [])],
            samples,
        )
        jobs = self._scheduler_jobs(name, settings, apis, uris, identities.invoker, serving, samples)
        # Log-based metrics on the function's lines, alert policies with runbooks, a dashboard.
        # Every region's function is the same Cloud Run service name, which the metrics filter
        # on: they count both regions' deliveries.
        declare_operations(
            settings.names.monitoring_prefix(),
            project=settings.project,
            function_service=function_service(functions[settings.region]),
            notification_channels=settings.alert_notification_channels,
            failure_pauses=any(job.pause_after_failures is not None for job in settings.jobs),
            opts=self._after(apis, "logging.googleapis.com", "monitoring.googleapis.com"),
        )
        self._publish_outputs(
            settings,
            uris[settings.region],
            jobs[settings.region],
            identities,
            build.account,
            ledger,
            targets,
            samples,
            queues,
        )

    # --- resource options shared by the parts ---------------------------------------------------

    def _child(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self)

    def _after(self, apis: _Apis, *names: str) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, depends_on=[apis[api] for api in names])

    def _function_opts(self, apis: _Apis, build: BuildIdentity) -> pulumi.ResourceOptions:
        # The first build needs the builder's grants in effect, not just created.
        return pulumi.ResourceOptions(
            parent=self, depends_on=[*(apis[api] for api in FUNCTION_APIS), build.ready]
        )

    # --- the architecture, in the order __init__ declares it ------------------------------------

    def _enable_apis(self, name: str, settings: StackSettings) -> _Apis:
        return {
            api: gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                project=settings.project,
                service=api,
                disable_on_destroy=False,
                opts=self._child(),
            )
            for api in REQUIRED_APIS + extra_apis(settings)
        }

    def _apis_serving(self, name: str, settings: StackSettings, apis: _Apis) -> pulumi.Resource:
        """One pause after every enabled API (infra/resources/propagation.py), slept again when
        the list changes. Its `region` trigger is the region checked against the last update's
        (infra/resources/last_update.py), with the run ledger's database and collection checked
        too: a refused region or ledger change fails here, before any resource that waits for
        the pause, which every resource of the Firestore, Artifact Registry and IAM APIs and
        every regional resource does."""
        return pause_after(
            name,
            API_ACTIVATION,
            after=list(apis.values()),
            triggers={"apis": " ".join(sorted(apis)), "region": checked_region(name, settings, parent=self)},
            opts=self._child(),
        )

    def _build(
        self,
        name: str,
        settings: StackSettings,
        apis: _Apis,
        ready: pulumi.Resource,
        function_dir: Path,
        table: pulumi.Input[str],
    ) -> BuildIdentity:
        source = function_source(
            name, settings, function_dir, pulumi.ResourceOptions(parent=self, depends_on=[ready]), table
        )
        return build_identity(
            name,
            settings,
            source,
            parent=self,
            iam_api=ready,
            registry_api=ready,
            build_apis=[apis[api] for api in FUNCTION_APIS],
        )

    def _invoker_binding(
        self,
        name: str,
        settings: StackSettings,
        function: gcp.cloudfunctionsv2.Function,
        invoker_account: gcp.serviceaccount.Account,
        region: str,
    ) -> gcp.cloudrunv2.ServiceIamMember:
        """The invoker may call the function of `region`: each region's jobs call their own."""
        return run_invoker(
            f"{regional_prefix(name, settings, region)}-invoker-run-invoker",
            INVOKER_CALLS_FUNCTION,
            settings,
            function_service(function),
            invoker_account.member,
            self._child(),
            region,
        )

    def _runtime_access(
        self,
        name: str,
        settings: StackSettings,
        apis: _Apis,
        runtime_account: gcp.serviceaccount.Account,
        targets: GrantedSamples,
    ) -> list[pulumi.Resource]:
        return runtime_access(
            name,
            settings,
            runtime_account.member,
            parent=self,
            created=dict(targets.created),
            apis=[apis[api] for api in extra_apis(settings)],
        )

    def _serving_grants_propagation(
        self,
        name: str,
        identities: Identities,
        serving_grants: list[pulumi.Resource],
        samples: CallingSamples,
    ) -> pulumi.Resource:
        """The first scheduled run uses every serving grant at once: the invoker's run.invoker,
        the functions' Firestore access, the proxy's workflows.invoker, the workflow account's
        run.invoker on the token check. The jobs wait until those have propagated, so the first
        run is not spent on 403s (Cloud Scheduler would retry it, but a fresh deploy should
        simply work). Shorter than the build's pause: see infra/resources/propagation.py."""
        grants = [*identities.grants, *serving_grants, *samples.grants]
        members: dict[str, pulumi.Input[str]] = {
            "runtime": identities.runtime.member,
            "invoker": identities.invoker.member,
        }
        if identities.token_check is not None:
            members["tokens"] = identities.token_check.member
        return pause_after(
            name,
            SERVING_GRANTS,
            after=grants,
            triggers=members,
            opts=self._child(),
        )

    def _scheduler_jobs(
        self,
        name: str,
        settings: StackSettings,
        apis: _Apis,
        function_uris: Mapping[str, pulumi.Output[str]],
        invoker_account: gcp.serviceaccount.Account,
        serving: pulumi.Resource,
        samples: CallingSamples,
    ) -> dict[str, list[gcp.cloudscheduler.Job]]:
        """Every job (the audit job too) in every region, by region, each calling its own
        region's function. A run is then delivered once from each region, with the same
        headers (infra/plan/headers.py), and the ledger runs it once: the audit's own runs too,
        so the audit runs once an hour, from whichever region delivers it first."""
        sample_workflows = samples.workflows
        # A proxy job starts its downstream work on its first run.
        first_run = [api for api in ("cloudscheduler.googleapis.com", *extra_apis(settings)) if api in apis]
        first_run_apis = [apis[api] for api in first_run]
        opts = pulumi.ResourceOptions(parent=self, depends_on=[*first_run_apis, serving])
        return {
            region: [
                scheduler_job(
                    regional_prefix(name, settings, region),
                    job,
                    settings,
                    uri,
                    invoker_account.email,
                    opts,
                    sample_workflows.get(job.name),
                    region,
                )
                for job in settings.jobs
            ]
            for region, uri in function_uris.items()
        }

    def _publish_outputs(
        self,
        settings: StackSettings,
        function_uri: pulumi.Output[str],
        jobs: list[gcp.cloudscheduler.Job],
        identities: Identities,
        builder_account: gcp.serviceaccount.Account,
        ledger: LedgerDatabase,
        targets: GrantedSamples,
        samples: CallingSamples,
        queues: Mapping[str, pulumi.Output[str]] | None,
    ) -> None:
        sample_workflows = dict(samples.workflows)
        self.function_uri = function_uri
        # The deployed Cloud Scheduler job ids (what `gcloud scheduler jobs list` shows).
        self.job_names = pulumi.Output.all(*[job.name for job in jobs]).apply(list)
        self.runtime_service_account_email = identities.runtime.email
        self.invoker_service_account_email = identities.invoker.email
        self.build_service_account_email = builder_account.email
        self.database_name = ledger.database_name
        self.runs_collection = pulumi.Output.from_input(settings.runs_collection)
        self.region = pulumi.Output.from_input(settings.region)
        self.token_check_uri = targets.token_check_uri
        self.token_check_service_account_email = (
            identities.token_check.email if identities.token_check is not None else None
        )
        self.workflow_service_account_email = samples.workflow_account_email
        self.sample_workflows = pulumi.Output.all(**sample_workflows).apply(dict)
        self.catchup_queue = queues[settings.region] if queues else None
        # One list (infra/plan/outputs.py) for what the component registers and the program
        # exports: a stack without a sample has no output for it, never a null.
        self.outputs: dict[str, pulumi.Input[object]] = {
            output.name: getattr(self, output.attribute) for output in outputs_of(settings)
        }
        self.register_outputs(self.outputs)


def sample_deployer() -> SampleDeployer:
    """The samples' deployer when this checkout has their room (`infra/samples/`, an optional
    part a fork may delete), found like the target kinds are rather than imported by name."""
    if not any(room.name == SAMPLES_ROOM for room in pkgutil.iter_modules(infra.__path__)):
        return NO_SAMPLES
    deployer: SampleDeployer = importlib.import_module(f"{infra.__name__}.{SAMPLES_ROOM}.deployer").DEPLOYER
    return deployer


def export_outputs(scheduler: ExactlyOnceScheduler) -> None:
    """`pulumi.export` the stack's outputs: exactly what the component registered."""
    for name, value in scheduler.outputs.items():
        pulumi.export(name, value)
