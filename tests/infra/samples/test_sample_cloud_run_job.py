"""The sample Cloud Run job's container, run as the stack runs it (`python3 -c <script>`), against
the real token check on the emulator and a loopback metadata server: two executions of one run
(the second one started after a lost answer) change state once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.proxy_runs import RUN_ID

SCRIPT = Path(__file__).resolve().parents[3] / "infra" / "samples" / "cloud_run_job.py"


class FakeMetadata:
    """The metadata server's identity endpoint: an ID token for any audience, recorded."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                fake.requests.append(
                    {
                        "path": parts.path,
                        "query": parse_qs(parts.query),
                        "flavor": self.headers.get("Metadata-Flavor"),
                    }
                )
                body = b"fake-id-token"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def metadata() -> Iterator[FakeMetadata]:
    fake = FakeMetadata()
    yield fake
    fake.server.shutdown()


@pytest.fixture
def token_check(function_servers, emulator_host, project):
    env = {"FIRESTORE_EMULATOR_HOST": emulator_host, "GOOGLE_CLOUD_PROJECT": project}
    return function_servers(env, target="check_idempotency_token")


def execute(token_check, metadata: FakeMetadata, execution: str, fence: int) -> list[dict[str, Any]]:
    """One execution of the sample job's container; its JSON log lines."""
    env = {
        "RUN_ID": RUN_ID,
        "FENCE": str(fence),
        "SCHEDULE_TIME": "2026-10-16T12:00:00Z",
        "SCHEDULER_JOB": "nightly",
        "TOKEN_CHECK_URL": token_check.url,
        "GCE_METADATA_HOST": metadata.host,
        "CLOUD_RUN_EXECUTION": execution,
        "CLOUD_RUN_TASK_INDEX": "0",
        "CLOUD_RUN_TASK_ATTEMPT": "0",
        "PATH": "/usr/bin:/bin",
    }
    script = SCRIPT.read_text(encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", script, "--day"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_two_executions_of_one_run_change_state_once(token_check, metadata, db):
    first = execute(token_check, metadata, "export-abc12", fence=100)
    assert [line["message"] for line in first] == ["state changed"]
    assert first[0]["run_id"] == RUN_ID

    second = execute(token_check, metadata, "export-def34", fence=100)
    assert second == [{"message": "skipped", "run_id": RUN_ID, "verdict": "duplicate"}]

    (record,) = list(db.collection("idempotency_tokens").stream())
    stored = record.to_dict()
    assert stored["status"] == "completed"
    assert json.loads(stored["result_json"])["args"] == ["--day"]
    # Each token call fetched an ID token for the token check from the metadata server.
    assert {r["query"]["audience"][0] for r in metadata.requests} == {token_check.url}
    assert {r["flavor"] for r in metadata.requests} == {"Google"}


def test_an_older_fence_after_a_newer_one_is_stale(token_check, metadata):
    assert [line["message"] for line in execute(token_check, metadata, "export-new", fence=200)] == [
        "state changed"
    ]
    stale = execute(token_check, metadata, "export-old", fence=100)
    assert stale == [{"message": "skipped", "run_id": RUN_ID, "verdict": "stale_fence"}]
