"""`smoke`: after `pulumi up`, prove the deployment works end to end, one step at a time.

1. force-run a job through the Cloud Scheduler API (what the schedule will do),
2. wait for its run record to reach `completed` (Scheduler -> function -> ledger),
3. check that the ledger's TTL policy is active (records will expire, retries still dedup).

Each step prints PASS or FAIL and, on failure, the likely fix. The API endpoints can be
pointed elsewhere (flags or environment), which is how the tests drive it against loopback
fakes that speak the same REST protocol.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

import google.auth
import requests
from google.auth import exceptions as auth_exceptions
from google.auth.transport.requests import Request
from google.cloud.firestore_v1.base_query import FieldFilter
from record_fields import CLAIMED_AT, EXPIRE_AT

from ops.context import StackContext, is_loopback, utc_now

SCHEDULER_ENDPOINT_ENV = "OPS_SCHEDULER_ENDPOINT"
FIRESTORE_ADMIN_ENDPOINT_ENV = "OPS_FIRESTORE_ADMIN_ENDPOINT"
SCHEDULER_ENDPOINT = "https://cloudscheduler.googleapis.com"
FIRESTORE_ADMIN_ENDPOINT = "https://firestore.googleapis.com"
DEFAULT_WAIT_SECONDS = 180.0
_POLL_SECONDS = 2.0
_API_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Endpoints:
    scheduler: str
    firestore_admin: str

    @classmethod
    def from_env(cls, scheduler: str | None = None, firestore_admin: str | None = None) -> Endpoints:
        return cls(
            scheduler=(scheduler or os.environ.get(SCHEDULER_ENDPOINT_ENV) or SCHEDULER_ENDPOINT).rstrip("/"),
            firestore_admin=(
                firestore_admin or os.environ.get(FIRESTORE_ADMIN_ENDPOINT_ENV) or FIRESTORE_ADMIN_ENDPOINT
            ).rstrip("/"),
        )


def access_token() -> str:
    """The operator's own access token (Application Default Credentials)."""
    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    credentials.refresh(Request())  # type: ignore[no-untyped-call]
    return str(credentials.token)


def _api_headers(url: str) -> dict[str, str]:
    """No token for a loopback endpoint (the tests' fakes); the operator's own otherwise."""
    return {} if is_loopback(url) else {"Authorization": f"Bearer {access_token()}"}


_NO_CREDENTIALS = "authenticate: `gcloud auth application-default login` ({error})"


def _likely_fix(api: str, response: requests.Response) -> str:
    """The fix an operator most likely needs for a failed Google API call."""
    try:
        error: Mapping[str, Any] = response.json().get("error", {})
    except ValueError:
        error = {}
    text = f"{error.get('status', '')} {error.get('message', response.text[:300])}"
    if response.status_code == 401:
        return "authenticate: `gcloud auth application-default login`"
    if response.status_code == 403 and ("SERVICE_DISABLED" in text or "has not been used" in text):
        return f"enable the API: `gcloud services enable {api}` (pulumi up enables it; wait a minute)"
    if response.status_code == 403:
        return f"IAM: your identity lacks the permission ({text.strip()})"
    if response.status_code == 404:
        return "not found: is the stack deployed (`pulumi up`) and is --stack the right one?"
    return f"HTTP {response.status_code}: {text.strip()}"


class Smoke:
    """The three steps; `out` gets one PASS/FAIL line per step."""

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

    def run(self, job_name: str | None) -> int:
        settings = self._context.job(job_name) if job_name else self._context.settings.jobs[0]
        job_id = self._context.settings.scheduler_job_id(settings)
        # A little slack for the clock difference between this machine and the function.
        started = self._clock() - timedelta(seconds=5)
        passed = self._force_run(job_id) and self._wait_for_completed(job_id, started)
        passed = self._ttl_active() and passed
        self._out.write(f"smoke test of stack {self._context.stack}: {'PASS' if passed else 'FAIL'}\n")
        return 0 if passed else 1

    def _step(self, ok: bool, step: str, detail: str) -> bool:
        self._out.write(f"{'PASS' if ok else 'FAIL'}  {step}: {detail}\n")
        return ok

    def _force_run(self, job_id: str) -> bool:
        context = self._context
        url = (
            f"{self._endpoints.scheduler}/v1/projects/{context.project}/locations/{context.location}"
            f"/jobs/{job_id}:run"
        )
        step = f"force-run Cloud Scheduler job {job_id}"
        try:
            response = requests.post(url, headers=_api_headers(url), json={}, timeout=_API_TIMEOUT_SECONDS)
        except auth_exceptions.GoogleAuthError as error:
            return self._step(False, step, _NO_CREDENTIALS.format(error=error))
        except requests.RequestException as error:
            return self._step(False, step, f"cannot reach {self._endpoints.scheduler}: {error}")
        if not response.ok:
            return self._step(False, step, _likely_fix("cloudscheduler.googleapis.com", response))
        return self._step(True, step, f"accepted ({response.json().get('name', job_id)})")

    def _wait_for_completed(self, job_id: str, since: datetime) -> bool:
        """Poll the ledger for a record of this job claimed since the smoke test started.
        An equality on job_name needs no composite index (and claimed_at is not indexed at
        all, see record_fields.UNINDEXED_RUN_FIELDS); the claim time is checked here."""
        step = "run record reaches completed"
        collection = self._context.firestore().collection(self._context.settings.runs_collection)
        query = collection.where(filter=FieldFilter("job_name", "==", job_id))
        deadline = time.monotonic() + self._wait
        latest: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            records = [doc.to_dict() or {} for doc in query.stream(timeout=_API_TIMEOUT_SECONDS)]
            mine = sorted(
                (
                    record
                    for record in records
                    if isinstance(claimed := record.get(CLAIMED_AT), datetime) and claimed >= since
                ),
                key=lambda record: record[CLAIMED_AT],
            )
            latest = mine[-1] if mine else latest
            if any(record.get("status") == "completed" for record in mine):
                done = next(record for record in mine if record.get("status") == "completed")
                return self._step(
                    True, step, f"result {done.get('result')} (attempt {done.get('attempt_id')})"
                )
            time.sleep(_POLL_SECONDS)
        if latest is None:
            return self._step(
                False,
                step,
                f"no run record within {self._wait:g}s: the delivery never reached the function or the "
                "ledger. Check the job's last attempt status (`gcloud scheduler jobs describe`): "
                "401/403 -> the invoker account needs roles/run.invoker and the OIDC audience must be "
                "the function URL; 404 -> wrong URL; ingress ALLOW_INTERNAL_ONLY admits Cloud Scheduler "
                "of the same project only; 500 store_error -> the runtime account's Firestore grant",
            )
        return self._step(
            False,
            step,
            f"record stuck at status {latest.get('status')!r} after {self._wait:g}s: read the function's "
            "log lines for this run (outcome, error)",
        )

    def _ttl_active(self) -> bool:
        context = self._context
        url = (
            f"{self._endpoints.firestore_admin}/v1/projects/{context.project}/databases/"
            f"{context.settings.database_name}/collectionGroups/{context.settings.runs_collection}"
            f"/fields/{EXPIRE_AT}"
        )
        step = f"TTL policy on {context.settings.runs_collection}.{EXPIRE_AT}"
        try:
            response = requests.get(url, headers=_api_headers(url), timeout=_API_TIMEOUT_SECONDS)
        except auth_exceptions.GoogleAuthError as error:
            return self._step(False, step, _NO_CREDENTIALS.format(error=error))
        except requests.RequestException as error:
            return self._step(False, step, f"cannot reach {self._endpoints.firestore_admin}: {error}")
        if not response.ok:
            return self._step(False, step, _likely_fix("firestore.googleapis.com", response))
        state = (response.json().get("ttlConfig") or {}).get("state")
        if state == "ACTIVE":
            return self._step(True, step, "ACTIVE")
        if state == "CREATING":
            return self._step(
                False, step, "still CREATING: Firestore takes up to ~10 minutes; run smoke again"
            )
        return self._step(
            False, step, f"state {state!r}: re-run `pulumi up` (the stack declares the TTL field {EXPIRE_AT})"
        )
