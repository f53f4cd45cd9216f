"""What every command needs: the stack's settings, its ledger, its jobs, and clean user errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from urllib.parse import urlparse

from google.cloud import firestore
from google.cloud.firestore_v1.services.firestore import FirestoreClient

from exactly_once.audit.config import AuditedJob
from exactly_once.audit.missed_runs import RecordReader
from exactly_once.audit.reads import AUDIT_FIELDS, database_name, firestore_api, firestore_reader
from exactly_once.delivery.scheduler_request import parse_rfc3339
from exactly_once.loopback import is_loopback_host
from infra.plan.audit_job import audited_jobs, with_audit_job
from infra.settings.jobs import JobSettings
from infra.settings.loading import load_stack_settings
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.problems import SettingsError

EMULATOR_HOST_ENV = "FIRESTORE_EMULATOR_HOST"


class UserError(Exception):
    """A mistake in what the operator asked for: printed as one line, ExitCode.USAGE_ERROR."""


class CloudUnreachable(Exception):
    """Google Cloud could not be asked (no credentials, say): printed as one line with the fix,
    ExitCode.CLOUD_UNREACHABLE, so a script does not take it for a finding about a run."""


@dataclass(frozen=True)
class StackContext:
    """One stack as the CLI sees it. `firestore_project` / `database` default to the stack's
    own; a local run on the emulator may keep its documents elsewhere."""

    stack: str
    settings: StackSettings
    firestore_project: str
    database: str

    @classmethod
    def load(
        cls,
        stack: str,
        firestore_project: str | None = None,
        database: str | None = None,
        stacks_dir: Path | None = None,
    ) -> StackContext:
        try:
            # The stack schedules the missed-run audit as one more job: it is audited too.
            settings = with_audit_job(load_stack_settings(stack, stacks_dir=stacks_dir))
        except SettingsError as error:
            raise UserError(str(error)) from None
        return cls(
            stack=stack,
            settings=settings,
            firestore_project=firestore_project or settings.project,
            database=database or settings.database_name,
        )

    @property
    def project(self) -> str:
        return self.settings.project

    @property
    def location(self) -> str:
        """The location run ids are computed with: the same from either region of a stack."""
        return self.settings.run_location

    def firestore(self) -> firestore.Client:
        """The ledger's client; FIRESTORE_EMULATOR_HOST, when set, points it at the emulator."""
        return firestore.Client(project=self.firestore_project, database=self.database)

    @cached_property
    def _records_api(self) -> FirestoreClient:
        """The generated client the reads below go through: one channel for every reader a
        command makes (status and the page read the audit's runs, then each job's)."""
        return firestore_api()

    def run_records(self, field_paths: Sequence[str] | None = AUDIT_FIELDS) -> RecordReader:
        """The audit's reader of the stack's run records (exactly_once/audit/reads.py), reading
        `field_paths` of each (None: whole records); FIRESTORE_EMULATOR_HOST applies as above."""
        return firestore_reader(
            self._records_api,
            database_name(self.firestore_project, self.database),
            self.settings.runs_collection,
            field_paths=field_paths,
        )

    def job(self, name: str) -> JobSettings:
        """The job called `name` in the stack config, or a UserError listing the names there are."""
        for job in self.settings.jobs:
            if job.name == name:
                return job
        known = ", ".join(job.name for job in self.settings.jobs)
        raise UserError(f"stack {self.stack!r} has no job {name!r}; its jobs are: {known}")

    def jobs(self, name: str | None) -> tuple[JobSettings, ...]:
        return (self.job(name),) if name is not None else self.settings.jobs

    def audited(self, job: JobSettings) -> AuditedJob:
        """`job` as the audit sees it: its run key (what its runs and status are keyed by, the
        deployed id unless the job sets runKey), schedule and retry window."""
        key_id = self.settings.run_key_id(job)
        return next(audited for audited in audited_jobs(self.settings) if audited.name == key_id)


def parse_time(value: str, flag: str) -> datetime:
    """An RFC 3339 time given on the command line, in UTC."""
    try:
        return parse_rfc3339(value)
    except ValueError as error:
        raise UserError(f"{flag}: {error}") from None


def utc_now() -> datetime:
    """Now, to the second: times the CLI prints read like the schedule times beside them."""
    return datetime.now(UTC).replace(microsecond=0)


def is_loopback(url: str) -> bool:
    """True for http(s)://localhost or a loopback address: a local server needs no token."""
    return is_loopback_host(urlparse(url).hostname)
