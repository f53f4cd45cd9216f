"""The prose of the generated reference tables: when each outcome happens, what each of the
function's variables means, what each field of a job means.

The tables' rows come from the code (tools/docs_tables.py renders them); only their meanings
are written here, each once, and `make docs` stops when the code has a row this file does not
describe.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactly_once.audit.config import MAX_CATCHUP_WINDOW_RUNS, REGION_ENV
from exactly_once.config import (
    DATABASE_ENV,
    JOB_HANDLER_ENV,
    JOB_TABLE_ENV,
    JOB_TABLE_FILE,
    LEASE_SECONDS_ENV,
    PROJECT_ENV,
    RETENTION_SECONDS_ENV,
    RUNS_COLLECTION_ENV,
    SERVICE_ENV,
    TIME_LIMIT_ENV,
    TIME_LIMIT_MARGIN_SECONDS,
    FunctionConfig,
)
from exactly_once.delivery.handler import MAX_BODY_BYTES
from exactly_once.delivery.outcomes import Outcome
from exactly_once.endpoints import (
    BIGQUERY_ENDPOINT_ENV,
    CLOUD_RUN_ENDPOINT_ENV,
    CLOUD_TASKS_ENDPOINT_ENV,
    ENDPOINT_VARIABLES,
    ID_TOKEN_DISABLED_ENV,
    WORKFLOWS_ENDPOINT_ENV,
)
from exactly_once.token_check.settings import COLLECTION_ENV, RETENTION_ENV, TokenStoreConfig
from policy.scheduler_guardrails.rules.config.access import GRANT_KINDS
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from policy.scheduler_guardrails.rules.timing.cron import DEFAULT_TIME_ZONE

# When each outcome happens. Kept with the docs rather than in the handler, whose table
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
    Outcome.SKIPPED_LATE: (
        "delivered more than the job's `startingDeadlineSeconds` after its ScheduleTime (Firestore's "
        "clock): recorded `skipped_late`, never run, and every later delivery gets the same answer"
    ),
    Outcome.SKIPPED_PAUSED: (
        "the job failed `pauseAfterFailures` runs in a row and is paused: recorded `skipped_paused`, "
        "never run, and every later delivery gets the same answer (a failing run's retries and forced "
        "runs still run)"
    ),
    Outcome.OVERLAP_WAIT: (
        "overlap policy `wait`: another run of the job holds its lock; nothing recorded, retried later "
        "(with `Retry-After`)"
    ),
    Outcome.WRONG_TARGET: (
        "the run's record belongs to another function (two deployments share a runs collection and a "
        "job name): refused loudly, never answered as a duplicate"
    ),
    Outcome.UNKNOWN_JOB: (
        "the function's job table does not name the job (the old Scheduler job of a renamed one, still "
        "firing during `pulumi up`, or a new one firing before the function names it): nothing "
        "recorded, no fallback handler run; Cloud Scheduler retries it"
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


# The API each endpoint switch of the proxy jobs redirects.
_ENDPOINT_APIS = {
    WORKFLOWS_ENDPOINT_ENV: "Workflows",
    CLOUD_RUN_ENDPOINT_ENV: "Cloud Run Admin API",
    BIGQUERY_ENDPOINT_ENV: "BigQuery",
    CLOUD_TASKS_ENDPOINT_ENV: "Cloud Tasks",
}
# A test-only switch of the shipped `jobs.downstream_http` job. It is defined in function/jobs/,
# which is deployed beside the package but not installed with it, so `make docs` cannot import it.


def _function_environment() -> tuple[EnvVar, ...]:
    """What the function reads at start-up. Names and defaults come from the function's own
    definitions; a test checks that every variable function/ reads is listed here and nothing else."""
    runs, tokens = FunctionConfig(), TokenStoreConfig()
    return (
        EnvVar(PROJECT_ENV, "from the runtime", "project of the Firestore database"),
        EnvVar(DATABASE_ENV, f"`{runs.database}`", "Firestore database id (`databaseName`)"),
        EnvVar(
            RUNS_COLLECTION_ENV, f"`{runs.runs_collection}`", "collection of run records (`runsCollection`)"
        ),
        EnvVar(
            LEASE_SECONDS_ENV,
            f"`{runs.lease_seconds:g}`",
            "a run's lease (`leaseSeconds`), renewed every third of it while the job runs: how "
            "long a crashed attempt blocks its run",
        ),
        EnvVar(
            TIME_LIMIT_ENV,
            f"`{runs.time_limit_seconds:g}`",
            "how long an attempt's job may run before its instance is ended (the stack sets "
            f"`functionTimeoutSeconds` - {TIME_LIMIT_MARGIN_SECONDS:g}); every job's limit, and the "
            "ceiling of the job table's `time_limit_seconds`",
        ),
        EnvVar(
            RETENTION_SECONDS_ENV,
            f"`{runs.retention_seconds:g}`",
            "`expire_at` = the owner's last write + this (`retentionSeconds`); at least "
            f"`{LEASE_SECONDS_ENV}`",
        ),
        EnvVar(
            JOB_HANDLER_ENV,
            "none",
            "the job logic of every job the job table names no handler for, `module:callable` inside "
            "`function/`; unset, such a job's runs fail, naming the job",
        ),
        EnvVar(
            SERVICE_ENV,
            "set by Cloud Run",
            "the service's name: recorded with each run as part of its target, so two functions sharing "
            "a runs collection never answer each other's runs",
        ),
        EnvVar(
            JOB_TABLE_ENV,
            f"`{JOB_TABLE_FILE}` in a stack",
            "path of the job table, JSON "
            '`{"jobs": {"<job id>": {"handler"?, "time_limit_seconds"?, "starting_deadline_seconds"?, '
            '"overlap"?, "run_key"?, "pause_after_failures"?, "time_zone"?}}, "names_every_job"?: true, '
            '"audit"?: {...}}`: every job of the stack, with its own handler (`jobs[].handler`), '
            "shorter limit than "
            f"`{TIME_LIMIT_ENV}` (`jobs[].timeLimitSeconds`), starting deadline "
            "(`jobs[].startingDeadlineSeconds`), overlap policy (`jobs[].overlap`), run key "
            "(`jobs[].runKey`, when not the job's name), pause after failed runs "
            "(`jobs[].pauseAfterFailures`) and zone (`jobs[].timeZone`), keyed by "
            "`X-CloudScheduler-JobName` (in a stack the deployed id, `eos-dev_nightly-report`), and the "
            "jobs the missed-run audit checks; the stack writes it into the function's source "
            "(docs/scale.md). With `names_every_job` (a stack's table), a job it does not name is refused "
            "(`unknown_job`); without, it runs `JOB_HANDLER`. Unset: no table, every job runs `JOB_HANDLER`",
        ),
        EnvVar(
            REGION_ENV,
            "none",
            "the region this function serves in, set by a stack with `secondRegion`: it picks this "
            "region's catch-up queue and URL from the job table's per-region `audit.redelivery`; "
            "unset, the table must name one redelivery for every region",
        ),
        EnvVar(
            COLLECTION_ENV,
            f"`{tokens.collection}`",
            "the token check's collection (`idempotencyCollection`)",
        ),
        EnvVar(
            RETENTION_ENV,
            f"`{tokens.retention_seconds:g}`",
            "a token record's lifetime (`idempotencyRetentionSeconds`)",
        ),
        *(
            EnvVar(
                kind.environment_variable,
                "none",
                f'JSON `{{"job name": {kind.environment_entry}}}`: what `{kind.handler_module}` runs '
                f"(`jobs[].{kind.key}`, set by the stack)",
            )
            for kind in TARGET_KINDS
            if kind.environment_variable is not None
        ),
        *(
            EnvVar(
                variable,
                "the library's",
                f"another {_ENDPOINT_APIS[variable]} endpoint (`host[:port]`, TLS); `http://` on loopback "
                "only, for tests",
            )
            for variable in ENDPOINT_VARIABLES
        ),
        EnvVar(
            ID_TOKEN_DISABLED_ENV,
            "`0`",
            "`1`: send no ID token downstream; tests only, loopback only",
        ),
    )


FUNCTION_ENVIRONMENT = _function_environment()


# What each field of a `jobs` entry means. The parser (infra/settings/jobs.py) defines which fields
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
        "`X-CloudScheduler-ScheduleTime`; so is a schedule that names no day that exists (`0 0 31 2 *`; "
        "`0 0 29 2 *` runs in leap years).",
    ),
    "timeZone": (
        "string",
        "IANA time zone of the schedule. The timing rules measure the gaps between runs in elapsed time "
        "in it, clock changes included, and `make check` advises on a run in an hour it skips or repeats "
        f"(docs/timing.md). `{DEFAULT_TIME_ZONE}` has no clock changes.",
    ),
    "attemptDeadlineSeconds": (
        "number",
        "HTTP attempt deadline, 15..1800 s: how long Cloud Scheduler waits for an attempt's answer.",
    ),
    "timeLimitSeconds": (
        "number",
        "How long one attempt of this job may run before the function ends it (goes into the job "
        f"table's `time_limit_seconds`). At most `functionTimeoutSeconds` - {TIME_LIMIT_MARGIN_SECONDS:g}: "
        "one function runs every job of "
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
        f"`module:callable` for this job only (goes into the job table, `{JOB_TABLE_ENV}`).",
    ),
    "overlap": (
        "string",
        "`allow`, `skip` or `wait`: what a run does while another run of this job holds its lease"
        f" (goes into the job table, `{JOB_TABLE_ENV}`).",
    ),
    "runKey": (
        "string",
        "What the job's runs are keyed by (their run ids, the job's status that `previous()` reads, "
        "the audit's history): same rules as `name`, and no two jobs keyed alike (a job without "
        "`runKey` is keyed by its `name`). Keep it when renaming the job: the renamed job carries on "
        f"from the old one's runs (goes into the job table, `{JOB_TABLE_ENV}`, only when it differs "
        "from `name`; see [jobs.md](jobs.md#renaming-a-job)).",
    ),
    "startingDeadlineSeconds": (
        "number",
        "A run whose delivery (first or retry) reaches the function more than this many seconds after "
        "its ScheduleTime, on Firestore's clock, is answered `skipped_late`, recorded, and not run "
        f"(goes into the job table, `{JOB_TABLE_ENV}`). At least 10, and not shorter than the first "
        "retry's backoff ([operations.md](operations.md#starting-deadline)).",
    ),
    "paused": (
        "boolean",
        "`true`: the Cloud Scheduler job is paused, and the audit counts its runs as paused, not missed. "
        "Always deployed (`false` when unset), so a `pulumi up` resumes a job paused by hand. Set "
        "(`true` or `false`), the stack records when it changes, so that a resume makes none of the "
        "pause's runs up (docs/operations.md, Pause).",
    ),
    "pauseAfterFailures": (
        "integer",
        "After this many runs of the job in a row failed (each counted once, however many of its "
        "attempts failed), its next runs are answered `skipped_paused`, recorded and not run, until a "
        f"run succeeds or `ops resume` (goes into the job table, `{JOB_TABLE_ENV}`). The Cloud Scheduler job "
        "is not paused. At least 1 (docs/operations.md, Paused after failures).",
    ),
    "catchup.windowSeconds": (
        "number",
        "How far back from each run of the missed-run audit it delivers this job's missed runs again. "
        "At least the job's retry window + the audit's interval, at most `retentionSeconds`, and no "
        f"longer than {MAX_CATCHUP_WINDOW_RUNS:,} of the job's runs (a week of a job each minute) "
        "(docs/operations.md, Catch-up).",
    ),
    "catchup.runs": (
        "string",
        "`all`: every missed run in the window, oldest first; `latest`: only the newest, when no later "
        "run is recorded.",
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
# Each target kind's rows, which its module holds: a fork that deletes the kind deletes them.
JOB_FIELD_MEANINGS.update(
    {f"{kind.key}.{key}": meaning for kind in TARGET_KINDS for key, meaning in kind.field_meanings.items()}
)
# One row per kind of resource a grant may name, from policy/scheduler_guardrails/rules/config/access.py's
# GRANT_KINDS.
JOB_FIELD_MEANINGS.update(
    {
        f"grants[].{kind.key}": (
            "string",
            f"`{kind.shown}`; roles: {', '.join(f'`{role}`' for role in sorted(kind.roles))}.",
        )
        for kind in GRANT_KINDS
    }
)
