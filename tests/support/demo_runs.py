"""Deliveries of one scheduled run of the demo job to a real function server, and what they
left in Firestore: the HTTP tests' shared request, environment and readers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests
from google.cloud.firestore_v1.base_query import FieldFilter

from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    LOCATION_HEADER,
    PROJECT_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from localrun.function_server import FunctionServer

# The repository's root, for a served function that imports the tests' job modules.
REPO_ROOT = str(Path(__file__).resolve().parents[2])
SCHEDULE_TIME = "2026-10-16T12:00:00Z"
HEADERS = {
    JOB_NAME_HEADER: "nightly",
    SCHEDULE_TIME_HEADER: SCHEDULE_TIME,
    PROJECT_HEADER: "acme",
    LOCATION_HEADER: "europe-west1",
}
RUN_ID = run_key_from_headers(HEADERS).run_id

Body = dict[str, object]


def server_env(emulator_host: str, project: str, **extra: str) -> dict[str, str]:
    return {
        "FIRESTORE_EMULATOR_HOST": emulator_host,
        "GOOGLE_CLOUD_PROJECT": project,
        "JOB_HANDLER": "jobs.demo:run_demo_job",
        "THREADS": "48",  # gunicorn threads: let a burst really run concurrently
        **extra,
    }


def deliver(server: FunctionServer, body: Body | None = None, headers=HEADERS) -> requests.Response:
    data = json.dumps(body).encode() if body is not None else b""
    return requests.post(server.url, headers=headers, data=data, timeout=60)


def executions(db, run_id=RUN_ID) -> list[Body]:
    query = db.collection("job_executions").where(filter=FieldFilter("run_id", "==", run_id))
    return [doc.to_dict() for doc in query.stream()]


def run_record(db):
    return db.collection("scheduler_runs").document(RUN_ID).get()


def outcome_of(reply: requests.Response | None) -> str:
    """A reply's outcome; "no answer" when the instance ended under the delivery."""
    return str(reply.json()["outcome"]) if reply is not None else "no answer"


def ended_lines(log_path: Path) -> list[dict[str, Any]]:
    """The function's log lines for attempts it ended (the watchdog's)."""
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "attempt_ended"]
