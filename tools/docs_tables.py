"""`make docs`: write the reference tables of docs/ from the code they describe.

A table that is typed by hand drifts from the code the day someone adds a config key or an
outcome; this one is rendered from the definitions themselves, between marker comments in the
pages, and tests/docs/ fails when a page differs from what this would write. Everything
outside the markers is left alone, so running it twice changes nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pulumi_policy import StackValidationPolicy

from exactly_once.config import TIME_LIMIT_MARGIN_SECONDS, FunctionConfig
from exactly_once.delivery.handler import MAX_BODY_BYTES
from exactly_once.delivery.outcomes import STATUS_AND_SEVERITY, Outcome
from exactly_once.token_check.settings import TokenStoreConfig
from infra.config_schema import CONFIG_KEYS, REPO_ROOT, ConfigKey
from infra.job_access import GRANT_KINDS
from infra.job_config import (
    _JOB_KEYS,
    _WORKFLOW_KEYS,
    DEFAULT_OVERLAP,
    DEFAULT_RETRY,
    DEFAULT_TIME_ZONE,
    RETRY_KEYS,
)
from infra.outputs import STACK_OUTPUTS
from infra.target_config import BIGQUERY_KEYS, CLOUD_RUN_KEYS
from policy.policies import POLICIES

DOCS = REPO_ROOT / "docs"
_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED -->)", re.S
)

# When each outcome happens. Kept beside the renderer rather than in the handler, whose table
# holds only what the code needs; a new outcome without a line here stops `make docs`.
_BODY_LIMIT_KIB = MAX_BODY_BYTES // 1024
OUTCOME_MEANINGS: dict[Outcome, str] = {
    Outcome.EXECUTED: "first claim of the run; the job succeeded",
    Outcome.DUPLICATE_COMPLETED: "the run had already completed; the job is not run again",
    Outcome.IN_PROGRESS: "another attempt holds a live lease; `Retry-After` = seconds left on it",
    Outcome.LEASE_TAKEN_OVER: "took over a crashed attempt's expired lease; the job succeeded",
    Outcome.LEASE_LOST: (
        "another attempt took the run over while this one ran: the instance stalled for longer than "
        "a lease (frozen, or cut off from Firestore) without the watchdog ending it"
    ),
    Outcome.FAILED_RELEASED: "the job raised; the claim was released so the next retry runs at once",
    Outcome.FAILED_TERMINAL: (
        "the job raised `TerminalJobError` (or its body or output cannot be right); recorded, not retried"
    ),
    Outcome.OVERLAP_SKIPPED: (
        "overlap policy `skip`: another run of the job held its lock; recorded, never run, and every "
        "later delivery gets the same answer"
    ),
    Outcome.OVERLAP_WAIT: (
        "overlap policy `wait`: another run of the job holds its lock; nothing recorded, retried later "
        "(with `Retry-After`)"
    ),
    Outcome.WRONG_TARGET: (
        "the run's record belongs to another function (two deployments share a runs collection and a "
        "job name): refused loudly, never answered as a duplicate"
    ),
    Outcome.BAD_REQUEST: (
        "a missing or malformed Scheduler header (named in the message), or a body shorter than its "
        "`Content-Length`; nothing written"
    ),
    Outcome.METHOD_NOT_ALLOWED: "not a `POST`: nothing is read or written",
    Outcome.BODY_TOO_LARGE: f"the body exceeds {_BODY_LIMIT_KIB} KiB: refused before anything is written",
    Outcome.STORE_ERROR: "Firestore failed or did not answer within the deadline",
    Outcome.INTERNAL_ERROR: "an unexpected exception (a bug): JSON answer and log line all the same",
}


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str
    meaning: str


def _function_environment() -> tuple[EnvVar, ...]:
    """What the function reads at start-up. Defaults come from the config classes themselves;
    a test checks that every variable function/ reads is listed here and nothing else."""
    runs, tokens = FunctionConfig(), TokenStoreConfig()
    return (
        EnvVar("GOOGLE_CLOUD_PROJECT", "from the runtime", "project of the Firestore database"),
        EnvVar("FIRESTORE_DATABASE", f"`{runs.database}`", "Firestore database id (`databaseName`)"),
        EnvVar(
            "RUNS_COLLECTION", f"`{runs.runs_collection}`", "collection of run records (`runsCollection`)"
        ),
        EnvVar(
            "LEASE_SECONDS",
            f"`{runs.lease_seconds:g}`",
            "a run's lease (`leaseSeconds`), renewed every third of it while the job runs: how "
            "long a crashed attempt blocks its run",
        ),
        EnvVar(
            "JOB_TIME_LIMIT_SECONDS",
            f"`{runs.time_limit_seconds:g}`",
            "how long an attempt's job may run before its instance is ended (the stack sets "
            f"`functionTimeoutSeconds` - {TIME_LIMIT_MARGIN_SECONDS:g}); every job's limit, and the "
            "ceiling of `JOB_TIME_LIMITS`",
        ),
        EnvVar(
            "RETENTION_SECONDS",
            f"`{runs.retention_seconds:g}`",
            "`expire_at` = the owner's last write + this (`retentionSeconds`); at least `LEASE_SECONDS`",
        ),
        EnvVar(
            "JOB_HANDLER", f"`{runs.job_handler}`", "default job logic, `module:callable` inside `function/`"
        ),
        EnvVar(
            "K_SERVICE",
            "set by Cloud Run",
            "the service's name: recorded with each run as part of its target, so two functions sharing "
            "a runs collection never answer each other's runs",
        ),
        EnvVar(
            "JOB_HANDLERS",
            "none",
            'JSON `{"<job id>": "module:callable"}` overriding `JOB_HANDLER` per job (`jobs[].handler`); '
            "keys are `X-CloudScheduler-JobName`, in a stack the deployed id (`eos-dev_nightly-report`)",
        ),
        EnvVar(
            "JOB_TIME_LIMITS",
            "none",
            'JSON `{"<job id>": <seconds>}`: jobs whose own limit (`jobs[].timeLimitSeconds`) is shorter '
            "than `JOB_TIME_LIMIT_SECONDS`, keyed like `JOB_HANDLERS`",
        ),
        EnvVar(
            "JOB_OVERLAP",
            "none",
            'JSON `{"<job id>": "skip" | "wait"}` (`jobs[].overlap`), keyed like `JOB_HANDLERS`; '
            "absent jobs allow",
        ),
        EnvVar(
            "IDEMPOTENCY_COLLECTION",
            f"`{tokens.collection}`",
            "the token check's collection (`idempotencyCollection`)",
        ),
        EnvVar(
            "IDEMPOTENCY_RETENTION_SECONDS",
            f"`{tokens.retention_seconds:g}`",
            "a token record's lifetime (`idempotencyRetentionSeconds`)",
        ),
        EnvVar(
            "AUDIT_JOBS",
            "required by the audit job",
            "the jobs the missed-run audit checks (JSON, set by the stack)",
        ),
        EnvVar(
            "CLOUD_RUN_JOBS",
            "none",
            'JSON `{"job name": {job, args?, env?, taskCount?, timeoutSeconds?}}`: what '
            "`jobs.cloud_run_job` runs (`jobs[].cloudRunJob`, set by the stack)",
        ),
        EnvVar(
            "BIGQUERY_JOBS",
            "none",
            'JSON `{"job name": {project, location, query, destinationTable?, writeDisposition?, '
            "labels?}}`: what `jobs.bigquery_job` runs (`jobs[].bigquery`, set by the stack)",
        ),
        *(
            EnvVar(
                variable,
                "the library's",
                f"another {api} endpoint (`host[:port]`, TLS); `http://` on loopback only, for tests",
            )
            for variable, api in (
                ("WORKFLOWS_API_ENDPOINT", "Workflows"),
                ("CLOUD_RUN_API_ENDPOINT", "Cloud Run Admin API"),
                ("BIGQUERY_API_ENDPOINT", "BigQuery"),
            )
        ),
        EnvVar(
            "DOWNSTREAM_ID_TOKEN_DISABLED",
            "`0`",
            "`1`: send no ID token downstream; tests only, loopback only",
        ),
    )


FUNCTION_ENVIRONMENT = _function_environment()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join(' --- ' for _ in header)}|"]
    lines += [f"| {' | '.join(_cell(cell) for cell in row)} |" for row in rows]
    return "\n".join(lines) + "\n"


def _default(key: ConfigKey) -> str:
    if key.default is None:
        return "derived (see meaning)"
    if isinstance(key.default, bool):
        return f"`{str(key.default).lower()}`"
    if isinstance(key.default, tuple):
        return f"`{list(key.default)}`"
    return f"`{key.default}`" if key.default != "" else '`""`'


# What each field of a `jobs` entry means. The parser (infra/job_config.py) defines which fields
# exist and their defaults; `make docs` stops when the two disagree.
JOB_FIELD_MEANINGS: dict[str, tuple[str, str]] = {
    "name": (
        "string",
        "1-100 of `A-Z a-z 0-9 - _`, unique in the stack; deployed as `<prefix>_<name>` (see "
        "[deploy.md](deploy.md)). `missed-run-audit` is the stack's own audit job.",
    ),
    "schedule": (
        "string",
        "Five-field unix-cron. Groc (`every 5 minutes`) is rejected: such jobs get no "
        "`X-CloudScheduler-ScheduleTime`.",
    ),
    "timeZone": ("string", "IANA time zone of the schedule."),
    "attemptDeadlineSeconds": (
        "number",
        "HTTP attempt deadline, 15..1800 s: how long Cloud Scheduler waits for an attempt's answer.",
    ),
    "timeLimitSeconds": (
        "number",
        "How long one attempt of this job may run before the function ends it (goes into "
        "`JOB_TIME_LIMITS`). At most `functionTimeoutSeconds` - 5: one function runs every job of "
        "the stack, so its timeout is the ceiling; give short jobs a limit of their own beside a long one.",
    ),
    "retry.retryCount": ("integer", "Retries after a failed attempt, 0..5."),
    "retry.minBackoffSeconds": ("number", "First backoff."),
    "retry.maxBackoffSeconds": ("number", "Backoff cap."),
    "retry.maxDoublings": ("integer", "Doublings before the backoff grows linearly."),
    "retry.maxRetryDurationSeconds": ("number", "Retry time limit (0 = none)."),
    "body": ("object", "JSON request body (the demo job reads `sleep_seconds` and `fail`)."),
    "handler": (
        "string",
        "`module:callable` for this job only (goes into `JOB_HANDLERS`). A job run by "
        "`jobs.workflows:start_workflow_execution` without a `workflow` setting must have a body "
        '`{"workflow": "projects/…/workflows/…", "argument"?: {...}}`.',
    ),
    "workflow.sample": (
        "boolean",
        "`true`: deploy the sample workflow for this job (plus the token check). The handler "
        "defaults to `jobs.workflows:start_workflow_execution` (any other is rejected) and the "
        "body is built by the stack, so `body` must not be set.",
    ),
    "workflow.name": (
        "string",
        "Instead of `sample`: an existing workflow, `projects/<p>/locations/<l>/workflows/<w>`; "
        "no sample is deployed. Exactly one of `sample: true` and `name`.",
    ),
    "workflow.argument": (
        "object",
        "Sent as the body's `argument`; the workflow receives it as `args.payload`.",
    ),
    "overlap": (
        "string",
        "`allow`, `skip` or `wait`: what a run does while another run of this job holds its lease"
        " (goes into `JOB_OVERLAP`).",
    ),
    "cloudRunJob.sample": (
        "boolean",
        "`true`: deploy the sample Cloud Run job for this job (plus the token check). The handler is "
        "`jobs.cloud_run_job:run_cloud_run_job` (any other is rejected); `body` must not be set. "
        "One of `workflow`, `cloudRunJob`, `bigquery` per job.",
    ),
    "cloudRunJob.job": (
        "string",
        "Instead of `sample`: an existing Cloud Run job, its name (in `gcp:project` and `gcp:region`) "
        "or `projects/<p>/locations/<l>/jobs/<j>`. The runtime account gets "
        "`roles/run.jobsExecutorWithOverrides` and `roles/run.viewer` on this job only.",
    ),
    "cloudRunJob.args": (
        "list of strings",
        "Container args for every execution (`[]` clears the job's own).",
    ),
    "cloudRunJob.env": (
        "object",
        "Container environment overrides for every execution; `RUN_ID`, `FENCE`, `SCHEDULE_TIME`, "
        "`SCHEDULER_JOB` are the run's own and cannot be set.",
    ),
    "cloudRunJob.taskCount": ("integer", "Tasks per execution (1..10000); default: the job's."),
    "cloudRunJob.timeoutSeconds": ("integer", "Task timeout (1..86400 s); default: the job's."),
    "bigquery.sample": (
        "boolean",
        "`true`: the stack's sample query, appending one row per run to a table of the stack's sample "
        "dataset (in `gcp:region`). The handler is `jobs.bigquery_job:run_bigquery_job`.",
    ),
    "bigquery.query": (
        "string",
        "Instead of `sample`: GoogleSQL, which may read `@run_id`, `@schedule_time`, `@job_name`. "
        "Keep it short (the function's environment holds it): call a view or procedure.",
    ),
    "bigquery.location": ("string", "Required with `query`: where the job runs (`EU`, `US`, a region)."),
    "bigquery.destinationTable": (
        "string",
        "`<project>.<dataset>.<table>` for the results; its dataset gets `roles/bigquery.dataEditor`.",
    ),
    "bigquery.writeDisposition": (
        "string",
        "`WRITE_APPEND`, `WRITE_TRUNCATE` or `WRITE_EMPTY` (with a table).",
    ),
    "bigquery.labels": ("object", "BigQuery job labels (lower-case keys and values)."),
    "bigquery.readDatasets": (
        "list of strings",
        "`<project>.<dataset>` the query reads: `roles/bigquery.dataViewer` on each, nothing more.",
    ),
    "bigquery.writeDatasets": (
        "list of strings",
        "`<project>.<dataset>` the query writes with DML: `roles/bigquery.dataEditor` on each.",
    ),
    "env": (
        "object",
        "`NAME: value` settings the function's environment carries (every job sees them: one value per "
        "name). Names that say secret (`*_PASSWORD`, `*_TOKEN`, `API_KEY`...) are refused: use `secrets`.",
    ),
    "secrets": (
        "object",
        "`NAME: <secret>` (this project, latest), `projects/<p>/secrets/<s>` or "
        "`projects/<p>/secrets/<s>/versions/<n>`: Cloud Run sets `NAME` to the secret's value; the "
        "runtime account gets `roles/secretmanager.secretAccessor` on that secret only.",
    ),
    "grants[].role": (
        "string",
        "A role for the runtime account on the one resource the grant names (below).",
    ),
}
# One row per kind of resource a grant may name, from infra/job_access.py's GRANT_KINDS.
JOB_FIELD_MEANINGS.update(
    {
        f"grants[].{kind.key}": (
            "string",
            f"`{kind.shown}`; roles: {', '.join(f'`{role}`' for role in sorted(kind.roles))}.",
        )
        for kind in GRANT_KINDS
    }
)


def _job_defaults() -> dict[str, str]:
    retry = {
        f"retry.{key}": f"`{getattr(DEFAULT_RETRY, attribute):g}`" for key, attribute in RETRY_KEYS.items()
    }
    return {
        "name": "— (required)",
        "schedule": "— (required)",
        "timeZone": f"`{DEFAULT_TIME_ZONE}`",
        "attemptDeadlineSeconds": "`timeLimitSeconds` + 5, else `functionTimeoutSeconds`",
        "timeLimitSeconds": "`functionTimeoutSeconds` - 5",
        **retry,
        "handler": "`jobHandler`",
        "overlap": f"`{DEFAULT_OVERLAP}`",
    }


def job_fields() -> list[str]:
    """Every field a `jobs` entry may set, as the parser spells them."""
    nested = ("retry", "workflow", "cloudRunJob", "bigquery", "grants")
    fields = [key for key in _JOB_KEYS if key not in nested]
    fields += [f"retry.{key}" for key in RETRY_KEYS]
    fields += [f"workflow.{key}" for key in _WORKFLOW_KEYS]
    fields += [f"cloudRunJob.{key}" for key in CLOUD_RUN_KEYS]
    fields += [f"bigquery.{key}" for key in BIGQUERY_KEYS]
    fields += ["grants[].role", *(f"grants[].{kind.key}" for kind in GRANT_KINDS)]
    return fields


def job_fields_table() -> str:
    fields = job_fields()
    if set(fields) != set(JOB_FIELD_MEANINGS):
        raise SystemExit(
            "tools/docs_tables.py: JOB_FIELD_MEANINGS does not match the parser's fields: "
            f"{sorted(set(fields) ^ set(JOB_FIELD_MEANINGS))}"
        )
    defaults = _job_defaults()
    rows = [
        (
            f"`{field}`",
            JOB_FIELD_MEANINGS[field][0],
            defaults.get(field, "none"),
            JOB_FIELD_MEANINGS[field][1],
        )
        for field in fields
    ]
    return _table(("Field", "Type", "Default", "Meaning"), rows)


def config_keys_table() -> str:
    types = {"array": "list of strings"}
    rows = [(f"`{k.name}`", types.get(k.type, k.type), _default(k), k.description) for k in CONFIG_KEYS]
    return _table(("Key", "Type", "Default", "Meaning"), rows)


def stack_outputs_table() -> str:
    rows = [
        (f"`{o.name}`", o.description + (" Only with a sample workflow." if o.sample_workflow_only else ""))
        for o in STACK_OUTPUTS
    ]
    return _table(("Output", "Meaning"), rows)


def policies_table() -> str:
    rows = [
        (
            f"`{p.name}`",
            "stack" if isinstance(p, StackValidationPolicy) else "resource",
            str(p.enforcement_level.value) if p.enforcement_level else "advisory",
            p.description,
        )
        for p in POLICIES
    ]
    return _table(("Policy", "Checks", "Level", "What it holds"), rows)


def outcomes_table() -> str:
    missing = [outcome.value for outcome in Outcome if outcome not in OUTCOME_MEANINGS]
    if missing:
        raise SystemExit(f"tools/docs_tables.py: describe the outcomes {missing} in OUTCOME_MEANINGS")
    rows = []
    for outcome in Outcome:
        status, severity = STATUS_AND_SEVERITY[outcome]
        rows.append((f"`{outcome.value}`", str(status), severity, OUTCOME_MEANINGS[outcome]))
    return _table(("Outcome", "HTTP", "Severity", "When"), rows)


def function_environment_table() -> str:
    rows = [(f"`{v.name}`", v.default, v.meaning) for v in FUNCTION_ENVIRONMENT]
    return _table(("Variable", "Default", "Meaning"), rows)


TABLES: dict[str, Callable[[], str]] = {
    "config-keys": config_keys_table,
    "stack-outputs": stack_outputs_table,
    "policies": policies_table,
    "outcomes": outcomes_table,
    "function-environment": function_environment_table,
    "job-fields": job_fields_table,
}


def render(text: str, source: str = "page") -> str:
    """`text` with every generated block rewritten; an unknown block name is an error."""

    def block(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            raise SystemExit(f"{source}: unknown generated block {name!r} (known: {', '.join(TABLES)})")
        return f"{match[1]}{TABLES[name]()}{match[4]}"

    return _BLOCK.sub(block, text)


def pages() -> list[Path]:
    return sorted([REPO_ROOT / "README.md", *DOCS.glob("*.md")])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        rendered = render(text, str(page.relative_to(REPO_ROOT)))
        if rendered != text:
            stale.append(page.relative_to(REPO_ROOT))
            if not args.check:
                page.write_text(rendered, encoding="utf-8")
    verb = "out of date" if args.check else "rewrote"
    for page_name in stale:
        print(f"{verb}: {page_name}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
