"""A loopback HTTP downstream that records every call and answers from a script."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from tests.support.google_rest_fake import HELD


@dataclass(frozen=True)
class Call:
    path: str
    headers: dict[str, str]
    body: Any


class FakeDownstream:
    """`script` answers the next calls in order: an int status, ("sleep", seconds) to outlast
    the caller's timeout, or HELD to answer only once the fake stops. Once it runs out, every
    call gets 200."""

    def __init__(self, script: list[int | tuple[str, float] | Literal["held"]] | None = None) -> None:
        self.script = list(script or [])
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                with fake._lock:
                    fake.calls.append(Call(self.path, dict(self.headers.items()), body))
                    step = fake.script.pop(0) if fake.script else 200
                if isinstance(step, tuple):
                    time.sleep(step[1])
                    step = 200
                elif step == HELD:
                    fake._stopping.wait()
                    step = 200
                payload = json.dumps({"status": step}).encode()
                try:
                    self.send_response(step)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller gave up waiting, as scripted

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/apply"

    def start(self) -> FakeDownstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
