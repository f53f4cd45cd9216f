"""Jobs whose effects ride with their run: checkpoints on the lease's heartbeat, and Firestore
writes staged in `context.writes`. Served by a real Functions Framework process as its
JOB_HANDLER module (JOB_HANDLER=tests.support.effect_jobs:<job>, the repository root on
PYTHONPATH); importing faulty_instance gives the instance's Firestore client its faults
(FIRESTORE_FAULTS), so a test can count and cut the ledger's RPCs on the wire.

The jobs read and mark with a client of their own (never faulted, never counted).
"""

from __future__ import annotations

import os
import time
from typing import Any

from google.cloud import firestore

from exactly_once import RetryableJobError, RunContext, firestore_client
from exactly_once.once import OncePerInstance
from tests.support import faulty_instance  # installs the instance's faults on import

REPORTS = "reports"
STARTED = "effect_started"
GO = "effect_go"
RUNS = "scheduler_runs"

_own_client = OncePerInstance(lambda: firestore.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT")))


def _wait_for(what: str, ready: Any, seconds: float = 60.0) -> None:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not happen within {seconds:g}s")


def checkpoint_then_die(context: RunContext) -> dict[str, Any]:
    """A first attempt saves {"step": 1}, lives until a lease renewal has written it to the run
    record, then dies with its process (os._exit: no answer, no release). An attempt that
    inherits a checkpoint returns it."""
    if context.last_checkpoint is not None:
        return {"resumed_from": context.last_checkpoint}
    context.checkpoint({"step": 1})
    record: Any = _own_client().collection(RUNS).document(context.run_id)
    _wait_for(
        "a renewal carrying the checkpoint", lambda: (record.get().to_dict() or {}).get("checkpoint_json")
    )
    os._exit(1)


def checkpoint_then_fail(context: RunContext) -> dict[str, Any]:
    """A first attempt saves {"step": 2} and fails retryably at once (no renewal happened); an
    attempt that inherits a checkpoint returns it."""
    if context.last_checkpoint is not None:
        return {"resumed_from": context.last_checkpoint}
    context.checkpoint({"step": 2})
    raise RetryableJobError("failed after step 2")


def _report(context: RunContext) -> Any:
    return _own_client().collection(REPORTS).document(context.run_id)


def stage_report(context: RunContext) -> dict[str, str]:
    """Stages the run's report (a counter incremented by one) in context.writes. With body
    {"hold": true}, marks itself started and waits for the test's go-ahead before returning:
    the test changes the run record meanwhile."""
    body = context.json_body(allowed_fields=("hold",))
    report = firestore_client().collection(REPORTS).document(context.run_id)
    context.writes.set(report, {"runs": firestore.Increment(1), "run_id": context.run_id}, merge=True)
    if body.get("hold"):
        own = _own_client()
        own.collection(STARTED).document(context.attempt_id).set({"run_id": context.run_id})
        go: Any = own.collection(GO).document(context.run_id)
        _wait_for("the test's go-ahead", lambda: go.get().exists)
    return {"report": report.path}


def stage_many(context: RunContext) -> dict[str, int]:
    """Stages `count` creates (body) in the `reports` collection of `database` (body, by
    default the ledger's), or creates of one `existing` document (body) a test made first, or
    a document nested `deep` levels (body) beside a create; returns how many it staged."""
    body = context.json_body(allowed_fields=("count", "database", "existing", "deep"))
    if body.get("deep"):
        # Maps nested deeper than Firestore stores: only the server refuses them.
        value: dict[str, Any] = {}
        inner = value
        for _ in range(int(body["deep"])):
            inner["a"] = {}
            inner = inner["a"]
        context.writes.create(firestore_client().collection(REPORTS).document("fresh"), {"n": 1})
        context.writes.set(firestore_client().collection(REPORTS).document("deep"), value)
        return {"staged": len(context.writes)}
    if "existing" in body:
        context.writes.create(firestore_client().collection(REPORTS).document("fresh"), {"n": 1})
        context.writes.create(
            firestore_client().collection(REPORTS).document(str(body["existing"])), {"n": 2}
        )
        return {"staged": len(context.writes)}
    client = firestore_client()
    if "database" in body:
        client = firestore.Client(project=client.project, database=str(body["database"]))
    for n in range(int(body.get("count", 1))):
        context.writes.create(client.collection(REPORTS).document(f"{context.run_id}-{n}"), {"n": n})
    return {"staged": len(context.writes)}


# --- the test's side ---------------------------------------------------------------------------


def effect_env(
    emulator_host: str, project: str, faults: faulty_instance.Faults, job: str, **extra: str
) -> dict[str, str]:
    """A served function whose job is `job` of this module and whose client `faults` rules."""
    env = faulty_instance.instance_env(emulator_host, project, faults, "marked_sleep", **extra)
    return {**env, "JOB_HANDLER": f"tests.support.effect_jobs:{job}"}
