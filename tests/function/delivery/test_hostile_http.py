"""Framing an adversary controls, on the wire to a real Functions Framework server: a body
cut short, a header sent twice, a header larger than any Scheduler sends."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER
from localrun.function_log import log_lines
from tests.support.demo_runs import HEADERS, deliver, executions, run_record


def raw_exchange(port: int, head: str, body: bytes, *, close_after_send: bool) -> tuple[int, dict[str, Any]]:
    """Send `head` and `body` as they are, optionally half-closing the connection (a client
    that went away mid-body), and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(head.encode("latin-1") + body)
        if close_after_send:
            connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and not close_after_send and _complete(answer):
                break
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload) if payload.startswith(b"{") else {}


def _complete(answer: bytes) -> bool:
    head, _, payload = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(payload) >= int(line.split(b":")[1])
    return False


def request_head(headers: list[tuple[str, str]], content_length: int) -> str:
    lines = ["POST / HTTP/1.1", "Host: 127.0.0.1", "Connection: close", f"Content-Length: {content_length}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return "\r\n".join(lines) + "\r\n\r\n"


@pytest.mark.parametrize("sent", [b'{"sleep', b""], ids=["partial-json", "nothing"])
def test_a_body_cut_short_is_400_and_claims_nothing(start_server, db, sent):
    """Content-Length 16, fewer bytes, then the connection breaks: the run must not be decided
    on those bytes. Scheduler's full retry then runs the job with the real body."""
    server = start_server()
    full = b'{"fail": false} '
    assert len(full) == 16
    status, answer = raw_exchange(
        server.port, request_head(list(HEADERS.items()), len(full)), sent, close_after_send=True
    )
    assert (status, answer["outcome"]) == (400, "bad_request")
    assert "ended after" in answer["message"] and "nothing was claimed" in answer["message"]
    assert not run_record(db).exists

    status, answer = raw_exchange(
        server.port, request_head(list(HEADERS.items()), len(full)), full, close_after_send=False
    )
    assert (status, answer["outcome"]) == (200, "executed")
    assert len(executions(db)) == 1


def test_a_job_name_header_sent_twice_is_400_naming_it(start_server, db):
    """Servers join repeated headers with a comma; the joined value must not name a new job."""
    server = start_server()
    headers = [*HEADERS.items(), (JOB_NAME_HEADER, "other-job")]
    status, answer = raw_exchange(server.port, request_head(headers, 0), b"", close_after_send=False)
    assert (status, answer["outcome"]) == (400, "bad_request")
    assert JOB_NAME_HEADER in answer["message"] and "repeated header" in answer["message"]
    assert list(db.collection("scheduler_runs").stream()) == []


def outcomes_logged(log_path) -> list[str]:
    return [line["outcome"] for line in log_lines(log_path) if "outcome" in line]


def test_a_header_beyond_the_server_limit_is_refused_before_the_function_and_writes_nothing(
    start_server, db, log_path
):
    """Over the 500 characters a Scheduler header holds: the function's own JSON 400. Over the
    server's 8190 bytes per header field: gunicorn's own 431 page, before any code of the
    function runs, so nothing is read, written or logged by it (docs/deduplication.md)."""
    server = start_server()
    started = len(outcomes_logged(log_path))  # the start-up probe's GET
    long_name = {**HEADERS, JOB_NAME_HEADER: "j" * 501}
    reply = deliver(server, headers=long_name)
    assert (reply.status_code, reply.json()["outcome"]) == (400, "bad_request")
    assert outcomes_logged(log_path)[started:] == ["bad_request"]

    huge = {**HEADERS, "X-Padding": "p" * 9000}
    refused = deliver(server, headers=huge)
    assert refused.status_code == 431 and not refused.headers["Content-Type"].startswith("application/json")
    assert list(db.collection("scheduler_runs").stream()) == []

    assert deliver(server).json()["outcome"] == "executed"
    assert outcomes_logged(log_path)[started:] == ["bad_request", "executed"]  # none for the 431


def test_a_token_check_body_cut_short_is_400_and_records_nothing(
    function_servers, emulator_host, project, db
):
    env = {"FIRESTORE_EMULATOR_HOST": emulator_host, "GOOGLE_CLOUD_PROJECT": project}
    server = function_servers(env, target="check_idempotency_token")
    full = json.dumps({"token": "t-1"}).encode()
    status, answer = raw_exchange(server.port, request_head([], len(full)), full[:5], close_after_send=True)
    assert (status, answer["error"]) == (400, "bad_request") and "ended after 5" in answer["message"]
    assert list(db.collection("idempotency_tokens").stream()) == []
