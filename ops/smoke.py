"""`smoke`: after `pulumi up`, prove the deployment works end to end, one step at a time.

1. run a job now, by `run-now`'s path (ops/run_now.py): Cloud Scheduler's RunJob, which the
   function records as a manual run of its own, never as the job's next scheduled run. By
   default the stack's own missed-run audit, never one of your jobs unless you name it,
2. wait for that manual run's record to reach `completed` (Scheduler -> function -> ledger),
3. check that the ledger's TTL policy is active (records will expire, retries still dedup).

Each step prints PASS or FAIL and, on failure, the likely fix. The two APIs are called through
Google's own client libraries (google-cloud-scheduler, the Firestore admin client), so
credentials, retries and errors behave as in every other Google client; ops/google_apis.py
says how their endpoints can be pointed at the tests' loopback fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud.firestore_admin_v1 import FirestoreAdminClient
from google.cloud.firestore_admin_v1.types import Field

from exactly_once.ledger.fields import EXPIRE_AT
from infra.settings.jobs import AUDIT_JOB_NAME, JobSettings
from ops.context import StackContext, UserError, utc_now
from ops.exit_codes import ExitCode
from ops.google_apis import (
    API_TIMEOUT_SECONDS,
    FIRESTORE_API,
    NO_CREDENTIALS,
    UNREACHABLE,
    Endpoints,
    caller_refused,
    client_options,
    likely_fix,
)
from ops.run_now import DEFAULT_WAIT_SECONDS, RunJobRefused, RunNow, describe

__all__ = ["DEFAULT_WAIT_SECONDS", "Endpoints", "Smoke"]


class Smoke:
    """The three steps; `out` gets one PASS/FAIL line per step. A step that could not ask
    Google Cloud fails too, but the exit status tells it from a step that found a problem."""

    def __init__(
        self,
        context: StackContext,
        out: TextIO,
        endpoints: Endpoints,
        *,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._context = context
        self._out = out
        self._endpoints = endpoints
        self._wait = wait_seconds
        self._clock = clock
        self._found_problem = False

    def run(self, job_name: str | None) -> ExitCode:
        settings = self._context.job(job_name) if job_name else self.default_job()
        job_id = self._context.settings.scheduler_job_id(settings)
        runner = RunNow(self._context, self._endpoints, self._wait, self._clock)
        since = self._force_run(runner, job_id)
        passed = since is not None and self._wait_for_completed(runner, job_id, since)
        passed = self._ttl_active() and passed
        self._out.write(f"smoke test of stack {self._context.stack}: {'PASS' if passed else 'FAIL'}\n")
        if passed:
            return ExitCode.OK
        # A problem found outweighs a step that could not look: the deployment is known broken.
        return ExitCode.RUN_PROBLEM if self._found_problem else ExitCode.CLOUD_UNREACHABLE

    def default_job(self) -> JobSettings:
        """The job smoke force-runs unasked: the stack's missed-run audit, which every stack
        deploys (unless missedRunAudit is false) and whose run only reads the ledger and logs
        what it finds. One of your jobs would really run: in prod, the real nightly report."""
        for job in self._context.settings.jobs:
            if job.name == AUDIT_JOB_NAME:
                return job
        raise UserError(
            f"stack {self._context.stack!r} deploys no missed-run audit (missedRunAudit: false), the job "
            "smoke force-runs by default; name one of your jobs with --job, knowing it will really run"
        )

    def _step(self, ok: bool, step: str, detail: str, *, unreachable: bool = False) -> bool:
        self._out.write(f"{'PASS' if ok else 'FAIL'}  {step}: {detail}\n")
        self._found_problem |= not ok and not unreachable
        return ok

    def _force_run(self, runner: RunNow, job_id: str) -> datetime | None:
        """RunJob; the moment from which the manual run is looked for, None when refused."""
        step = f"force-run Cloud Scheduler job {job_id}"
        try:
            since = runner.start(job_id)
        except RunJobRefused as error:
            self._step(False, step, str(error), unreachable=error.unreachable)
            return None
        self._step(True, step, "accepted: a manual run of its own, as `run-now` starts one")
        return since

    def _wait_for_completed(self, runner: RunNow, job_id: str, since: datetime) -> bool:
        step = "manual run record reaches completed"
        done, latest = runner.wait(job_id, since)
        if done is not None:
            return self._step(True, step, describe(done))
        if latest is None:
            return self._step(
                False,
                step,
                f"no manual run recorded within {self._wait:g}s: the delivery never reached the function or "
                "the ledger. Check the job's last attempt status (`gcloud scheduler jobs describe`): "
                "401/403 -> the invoker account needs roles/run.invoker and the OIDC audience must be "
                "the function URL; 404 -> wrong URL; ingress ALLOW_INTERNAL_ONLY admits Cloud Scheduler "
                "of the same project only; 500 store_error -> the runtime account's Firestore grant",
            )
        return self._step(
            False,
            step,
            f"record stuck after {self._wait:g}s ({describe(latest)}): read the function's log lines for "
            "this run (outcome, error)",
        )

    def _ttl_active(self) -> bool:
        context = self._context
        name = FirestoreAdminClient.field_path(
            context.project, context.settings.database_name, context.settings.runs_collection, EXPIRE_AT
        )
        step = f"TTL policy on {context.settings.runs_collection}.{EXPIRE_AT}"
        try:
            admin = FirestoreAdminClient(**client_options(self._endpoints.firestore_admin))
            field = admin.get_field(name=name, timeout=API_TIMEOUT_SECONDS)
        except auth_exceptions.DefaultCredentialsError as error:
            return self._step(False, step, NO_CREDENTIALS.format(error=error), unreachable=True)
        except api_exceptions.GoogleAPICallError as error:
            refused = caller_refused(error)
            return self._step(False, step, likely_fix(FIRESTORE_API, error), unreachable=refused)
        except UNREACHABLE as error:
            return self._step(False, step, f"cannot reach the Firestore admin API: {error}", unreachable=True)
        state = field.ttl_config.state
        if state == Field.TtlConfig.State.ACTIVE:
            return self._step(True, step, "ACTIVE")
        if state == Field.TtlConfig.State.CREATING:
            return self._step(
                False, step, "still CREATING: Firestore takes up to ~10 minutes; run smoke again"
            )
        return self._step(
            False,
            step,
            f"state {state.name}: re-run `pulumi up` (the stack declares the TTL field {EXPIRE_AT})",
        )
