"""A stack's settings from its config: read, checked key by key, then as a whole.

Every error names the Pulumi config key a user has to edit (`<project>:jobs[0].schedule`), not
the Python attribute it ended up in, and all of them are reported at once, so one `pulumi up`
(or `make check`) shows every problem. The keys are declared in `Pulumi.yaml` (read by
infra/config/schema.py), the jobs' fields in infra/settings/jobs.py, the ledger's keys in
infra/config/ledger.py. No Pulumi engine: the local tools load a stack's config through
infra/settings/stack_config.py, as `pulumi up` resolves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exactly_once.config import HANDLER_PATTERN
from infra.config.ledger import ledger_keys
from infra.config.schema import (
    CONFIG_KEYS,
    FUNCTION_DIR,
    INGRESS_SETTINGS,
    JOBS_KEY,
    KEYS_BY_NAME,
    REPO_ROOT,
    integer_value,
    notification_channels,
    scalar_value,
)
from infra.settings.body_checks import body_errors
from infra.settings.catchup_checks import catchup_errors
from infra.settings.environment import access_errors, stack_environment
from infra.settings.jobs import AUDIT_JOB_NAME, JobSettings, parse_jobs
from infra.settings.kept_settings import DATABASE_OUTPUT, LEDGER_MOVED_FROM_KEY, ledger_moved_from
from infra.settings.label_checks import LABELS_KEY, fork_labels
from infra.settings.region_checks import region_errors
from infra.settings.samples import SAMPLE_JOB_NAMES, with_samples
from infra.settings.stack import StackSettings
from infra.settings.stack_config import read_stack_config
from infra.settings.timing_checks import timing_errors
from policy.scheduler_guardrails.rules.config.handlers import check_handlers, malformed_handler
from policy.scheduler_guardrails.rules.config.names import StackNames
from policy.scheduler_guardrails.rules.config.problems import ConfigProblems, SettingsError, unknown_keys
from policy.scheduler_guardrails.rules.targets.registry import kind_for_handler


def settings_from_config(
    values: Mapping[str, Any],
    *,
    project: str,
    region: str,
    stack: str,
    namespace: str,
    function_dir: Path = FUNCTION_DIR,
) -> StackSettings:
    """Settings from un-namespaced config `values` (camelCase keys), defaults applied.

    Raises SettingsError listing every problem at once, so one `pulumi up` shows them all.
    `namespace` (the Pulumi project's name) qualifies the keys in messages; the handlers
    are checked against the source in `function_dir`.
    """
    errors = ConfigProblems(namespace)
    if not project:
        errors.append("gcp:project is not set (pulumi config set gcp:project <project-id>)")
    if not region:
        errors.append("gcp:region is not set (pulumi config set gcp:region <region>)")
    unknown_keys(values, "", (*KEYS_BY_NAME, JOBS_KEY), errors, what="config key")

    scalars = {key.name: scalar_value(values, key, errors) for key in CONFIG_KEYS}
    timeout = int(integer_value(scalars["functionTimeoutSeconds"]))
    lease = int(integer_value(scalars["leaseSeconds"]))
    ingress = str(scalars["ingress"])
    if ingress not in INGRESS_SETTINGS:
        errors.append(f"{errors.key('ingress')}: {ingress!r} is not one of {', '.join(INGRESS_SETTINGS)}")
    max_instances = integer_value(scalars["maxInstances"])
    if max_instances < 1:
        errors.append(f"{errors.key('maxInstances')}: {max_instances} must be at least 1")
    job_handler = str(scalars["jobHandler"])
    if job_handler and not HANDLER_PATTERN.match(job_handler):
        errors.append(f"{errors.key('jobHandler')}: {malformed_handler(job_handler)}")
    ledger = ledger_keys(scalars, errors)
    channels = notification_channels(scalars["alertNotificationChannels"], errors)

    own_jobs = values.get(JOBS_KEY)
    samples = bool(scalars["samples"])
    raw_jobs = with_samples(own_jobs) if samples else own_jobs
    jobs = parse_jobs(raw_jobs, timeout, errors)
    check_untargeted_jobs(raw_jobs, jobs, job_handler, errors)
    unhandled = {job.name for job in jobs if job.handler is None}
    check_handlers(job_handler, raw_jobs, unhandled, function_dir, errors)
    reserved = {AUDIT_JOB_NAME: "the stack's own missed-run audit job"}
    if samples:
        reserved.update(dict.fromkeys(SAMPLE_JOB_NAMES, "a sample job (samples: true)"))
    errors.extend(
        f"{errors.key(f'jobs[{index}].name')}: {raw['name']!r} is the name of {reserved[raw['name']]}; "
        "choose another"
        for index, raw in enumerate(own_jobs if isinstance(own_jobs, list) else [])
        if isinstance(raw, Mapping) and raw.get("name") in reserved
    )
    try:
        StackNames(stack)
    except ValueError as error:
        errors.append(f"stack name {stack!r}: {error}")
    moved_from = str(scalars["ledgerMovedFrom"])
    if moved_from and not ledger_moved_from(moved_from, DATABASE_OUTPUT):
        errors.append(
            f"{errors.key(LEDGER_MOVED_FROM_KEY)}: {moved_from!r} is not '<databaseName>/<runsCollection>', "
            "the ledger's place as the last update recorded it"
        )
    settings = StackSettings(
        project=project,
        region=region,
        stack=stack or "stack",
        config_namespace=namespace,
        configured_database=ledger.database,
        create_database=ledger.create_database,
        runs_collection=ledger.runs_collection,
        function_timeout_seconds=float(timeout),
        lease_seconds=lease,
        retention_seconds=float(ledger.retention_seconds),
        max_instances=max_instances,
        ingress=ingress,
        deletion_protection=bool(scalars["deletionProtection"]),
        job_handler=job_handler,
        jobs=jobs,
        idempotency_collection=ledger.idempotency_collection,
        idempotency_retention_seconds=float(ledger.idempotency_retention_seconds),
        alert_notification_channels=channels,
        missed_run_audit=bool(scalars["missedRunAudit"]),
        second_region=str(scalars["secondRegion"]),
        database_location=str(scalars["databaseLocation"]),
        ledger_moved_from=moved_from,
        labels=fork_labels(scalars[LABELS_KEY], errors),
    )
    errors.extend(region_errors(settings, errors))
    if not errors:
        errors.extend(access_errors(settings, stack_environment(settings)))
    if not errors:
        errors.extend(timing_errors(settings))
        errors.extend(catchup_errors(settings))
        errors.extend(body_errors(settings, function_dir))
    if errors:
        lines = "\n".join(f"  - {error}" for error in dict.fromkeys(errors))
        raise SettingsError(f"invalid config for stack {stack!r}:\n{lines}")
    return settings


def check_untargeted_jobs(
    raw: Any, jobs: tuple[JobSettings, ...], default_handler: str, errors: ConfigProblems
) -> None:
    """A job that runs a target kind's proxy without that kind's setting: each kind says
    whether its body can stand in for the setting (a Workflows body can) and what is wrong."""
    items = raw if isinstance(raw, list) else []
    indexes = {item.get("name"): index for index, item in enumerate(items) if isinstance(item, Mapping)}
    for job in jobs:
        kind = kind_for_handler(job.handler or default_handler)
        if kind is None or job.target is not None:
            continue
        index = indexes.get(job.name, 0)
        handler_key = f"jobs[{index}].handler" if job.handler else "jobHandler"
        if problem := kind.untargeted_problem(job.name, job.body, index, handler_key):
            errors.append(f"{errors.key(problem[0])}: {problem[1]}")


def stack_names(folder: Path = REPO_ROOT) -> list[str]:
    """The stacks whose `Pulumi.<stack>.yaml` is in `folder` (the project's own: the forker's)."""
    return sorted(
        path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in folder.glob("Pulumi.*.yaml")
    )


def load_stack_settings(
    stack: str = "dev", root: Path = REPO_ROOT, stacks_dir: Path | None = None
) -> StackSettings:
    """Settings of `stack` for code that runs without the Pulumi engine (the local scheduler,
    the operations tooling, `make check`, tests), from its config as `pulumi up` resolves it
    (infra/settings/stack_config.py: the Pulumi CLI's answer where it is on PATH, else the YAML
    files). The config namespace is Pulumi.yaml's `name:`. `stacks_dir` holds
    `Pulumi.<stack>.yaml`: the project's root (the forker's stacks) unless the template's own
    stacks are meant (its test fixtures, the demo's stack), which are always read from the file."""
    config = read_stack_config(stack, root, stacks_dir)
    return settings_from_config(
        config.values,
        project=config.project,
        region=config.region,
        stack=stack,
        namespace=config.namespace,
        function_dir=root / FUNCTION_DIR.name,
    )
