"""Every name the stack chooses for itself, unique per stack and valid under Google Cloud's rules.

Many stacks (dev, staging, a branch preview) may share one project, so nothing the program
names may be a constant: each id starts with a prefix made of the component name and the stack
name. Long or unusual stack names are shortened *stably*: truncated, then a short hash of the
full, unmodified identity is appended, so the same stack always gets the same ids and two stacks
whose names differ anywhere (even only in their last character, or only in `_` versus `-`) never
share one. Only the names that had to change carry a hash; `eos-dev-runtime` stays readable.

One function per kind of id, each with that kind's rules. The stack, the local scheduler and
the operations tooling all take names from here, so they agree on what was deployed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# The name `__main__.py` gives its one ExactlyOnceScheduler, the first part of every name the
# stack chooses (`eos-dev-runtime`); the local tools (`ops`, `make demo`) assume it.
COMPONENT_NAME = "eos"

# Hex characters of the hash appended to a shortened name: 16.7 million values, so two stack
# names in one project colliding by chance is not a practical concern.
TAG_LENGTH = 6

SERVICE_ACCOUNT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")  # 6-30
FUNCTION_NAME = re.compile(r"^[a-z][a-z0-9-]{0,61}[a-z0-9]$")  # also its Cloud Run service's name
SCHEDULER_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,500}$")
REPOSITORY_ID = re.compile(r"^[a-z][a-z0-9-]{0,61}[a-z0-9]$")
WORKFLOW_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}[A-Za-z0-9]$")
DATABASE_ID = re.compile(r"^[a-z][a-z0-9-]{2,61}[a-z0-9]$")  # 4-63
BIGQUERY_DATASET_ID = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
BIGQUERY_TABLE_ID = re.compile(r"^[A-Za-z0-9_]{1,1024}$")

_SERVICE_ACCOUNT_MAX = 30
_FUNCTION_MAX = 63
_SCHEDULER_JOB_MAX = 500
_REPOSITORY_MAX = 63
_WORKFLOW_MAX = 64
_DATABASE_MAX = 63
_CLOUD_RUN_JOB_MAX = 63
_DATASET_MAX = 1024
# Log-based metric ids are at most 100 characters: the prefix leaves room for their suffixes.
_MONITORING_PREFIX_MAX = 60
# Queue ids: letters, digits and hyphens, at most 100.
TASK_QUEUE_ID = re.compile(r"^[A-Za-z0-9-]{1,100}$")
_TASK_QUEUE_MAX = 100
# A queue id ends in when its queue was created, in unix seconds: 10 digits until the year 2286.
_QUEUE_CREATED_DIGITS = 10
# Label values: at most 63 of lower-case letters, digits, '_' and '-'.
_LABEL_VALUE_MAX = 63
# Service account display names: at most 100 bytes (UTF-8).
DISPLAY_NAME_MAX_BYTES = 100
_DISPLAY_NAME = "Exactly-once scheduler ({stack}): {title}"
# Job names are the user's ('-' and '_' allowed), so the prefix ends at a character it never
# contains itself: stack `dev` with job `a-b` and stack `dev-a` with job `b` stay apart.
_JOB_SEPARATOR = "_"
# The fixed suffixes (roles, "ledger", ...) never end in another one after a '-', so
# `<prefix>-<suffix>` cannot be read two ways either.
_COMPONENT = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


def stable_tag(identity: str, length: int = TAG_LENGTH) -> str:
    """A short hash of `identity`: the same on every deploy, so a name built with it is too."""
    return hashlib.sha256(identity.encode()).hexdigest()[:length]


def _slug(text: str) -> str:
    """Lower-case letters, digits and single hyphens: what every id kind here accepts."""
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


@dataclass(frozen=True)
class StackNames:
    """The names of one component in one stack."""

    stack: str
    component: str = COMPONENT_NAME

    def __post_init__(self) -> None:
        if not _COMPONENT.match(self.component):
            raise ValueError(
                f"component name {self.component!r} must be 1-40 of a-z, 0-9, '-', starting with a letter"
            )
        if not self.stack:
            raise ValueError("the stack name is empty")

    @property
    def prefix(self) -> str:
        """`<component>-<stack>` as ids may spell it (possibly long: the kinds shorten it)."""
        return f"{self.component}-{_slug(self.stack) or 'stack'}"

    def _name(
        self, suffix: str, max_length: int, *, separator: str = "-", readable_suffix: str | None = None
    ) -> str:
        """`<prefix><separator><suffix>`, or, when it is too long or the prefix or suffix had to
        be rewritten, a shortened form that carries a hash of the original identity."""
        shown = suffix if readable_suffix is None else readable_suffix
        full = f"{self.prefix}{separator}{shown}"
        exact = self.prefix == f"{self.component}-{self.stack}" and shown == suffix
        if exact and len(full) <= max_length:
            return full
        tag = stable_tag(f"{self.component}\0{self.stack}\0{suffix}")
        # Keep the suffix whole when there is room (it says what the thing is); else cut it too.
        room = max_length - len(shown) - len(tag) - 2
        if room >= len(self.component) + 2:
            return f"{self.prefix[:room].rstrip('-')}-{tag}{separator}{shown}"
        return f"{full[: max_length - len(tag) - 1].rstrip('-_')}-{tag}"

    def service_account_id(self, role: str) -> str:
        """A service account id: 6-30 of a-z, 0-9, '-', starting with a letter."""
        return self._name(role, _SERVICE_ACCOUNT_MAX)

    def function_name(self, role: str) -> str:
        """A Cloud Run function name (also its Cloud Run service's): at most 63, lower-case."""
        return self._name(role, _FUNCTION_MAX)

    def scheduler_job_id(self, job_name: str) -> str:
        """The Cloud Scheduler job id of the configured job `job_name`. Cloud Scheduler sends it
        as X-CloudScheduler-JobName, so it is the job name the function sees."""
        return self._name(job_name, _SCHEDULER_JOB_MAX, separator=_JOB_SEPARATOR)

    def repository_id(self) -> str:
        """The Artifact Registry repository holding the functions' images."""
        return self._name("functions", _REPOSITORY_MAX)

    def workflow_name(self, job_name: str) -> str:
        """A workflow id (letters, digits, '-', '_'; at most 64; ends in a letter or digit)."""
        readable = job_name.rstrip("-_") or "workflow"
        return self._name(job_name, _WORKFLOW_MAX, separator=_JOB_SEPARATOR, readable_suffix=readable)

    def cloud_run_job_name(self, job_name: str) -> str:
        """The sample Cloud Run job of the configured job `job_name` (a-z, 0-9, '-'; at most
        63). Always carries the hash: '-' joins the prefix and the job name, and both may
        contain it, so only the hash keeps stack `dev` job `a-b` apart from stack `dev-a` job `b`."""
        return self._name(f"job:{job_name}", _CLOUD_RUN_JOB_MAX, readable_suffix=_slug(job_name) or "job")

    def sample_dataset_id(self) -> str:
        """The BigQuery dataset of the stack's sample BigQuery jobs (letters, digits, '_')."""
        return self._name("samples", _DATASET_MAX).replace("-", "_")

    def sample_table_id(self, job_name: str) -> str:
        """The table a sample BigQuery job appends its runs to; a job name BigQuery cannot
        spell as is gets the hash of the original, so `a-b` and `a_b` stay apart."""
        table = f"{job_name}_runs"
        if BIGQUERY_TABLE_ID.match(table):
            return table
        return f"{re.sub(r'[^A-Za-z0-9_]', '_', job_name)}_{stable_tag(job_name)}_runs"

    def task_queue_id(self, created: int) -> str:
        """The Cloud Tasks queue the missed-run audit's catch-up deliveries go through, created
        at `created` (unix seconds). Cloud Tasks keeps a deleted queue's name for days, and a
        create of that name in the meantime may seem to succeed and has not: every creation of
        the queue (a `pulumi destroy` and `up`, catch-up switched off and on) gets a name of
        its own, which infra/resources/catchup_queue.py takes from a time recorded with it."""
        stamp = str(created)
        if not stamp.isdigit() or len(stamp) > _QUEUE_CREATED_DIGITS:
            raise ValueError(f"a queue's creation time is unix seconds, not {created!r}")
        return f"{self._name('catchup', _TASK_QUEUE_MAX - _QUEUE_CREATED_DIGITS - 1)}-{stamp}"

    def monitoring_prefix(self) -> str:
        """Prefix of the log-based metric ids, alert policy and dashboard names."""
        return self._name("ops", _MONITORING_PREFIX_MAX)

    def database_id(self) -> str:
        """The Firestore database id of a stack that creates its own ledger database."""
        return self._name("ledger", _DATABASE_MAX)

    def stack_label(self) -> str:
        """The stack's name as a label value (`eos-stack: <stack>` on every resource that can
        carry labels): as written when a label value may hold it, else lower-cased, with any
        other character a '-', shortened, and the hash of the name as written appended, so two
        stacks whose names differ only in case or punctuation are told apart."""
        slug = re.sub(r"[^a-z0-9_-]", "-", self.stack.lower())
        if slug == self.stack and len(slug) <= _LABEL_VALUE_MAX:
            return slug
        tag = stable_tag(self.stack)
        return f"{slug[: _LABEL_VALUE_MAX - len(tag) - 1]}-{tag}"

    def display_name(self, title: str) -> str:
        """A service account's display name: which stack, and what the account does.

        The stack name is shown as written (the console lists accounts by display name), and
        shortened with the hash of the full identity when the whole would pass 100 bytes, so a
        stack name of any length Pulumi accepts still gives a valid, distinct name."""
        full = _DISPLAY_NAME.format(stack=self.stack, title=title)
        if len(full.encode()) <= DISPLAY_NAME_MAX_BYTES:
            return full
        frame = len(_DISPLAY_NAME.format(stack="", title=title).encode())
        room = DISPLAY_NAME_MAX_BYTES - frame - TAG_LENGTH - 1
        if room < 1:
            raise ValueError(f"display name title {title!r} leaves no room for the stack name")
        tag = stable_tag(f"{self.component}\0{self.stack}")
        shown = f"{self.stack.encode()[:room].decode(errors='ignore')}~{tag}"
        return _DISPLAY_NAME.format(stack=shown, title=title)
