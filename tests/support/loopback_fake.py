"""The one base of the tests' loopback fakes: a server on 127.0.0.1 at a port the system picks,
every request recorded, a script for the next answers, and answers held until the fake stops.

`LoopbackFake` is the lifecycle and the bookkeeping; `HttpFake` serves HTTP with it (the
REST APIs, a downstream, a function), `GrpcFake` serves gRPC (the APIs whose official client
speaks only gRPC). A fake answers as the real service does on the wire; the script only says
which of the next calls fail, lose their answer or are held.

Use: `with Fake() as fake:` or `fake = Fake().start()` ... `fake.stop()`. Stopping releases
every held answer (to clients long gone) and closes the port; a fake is started once.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Generic, Literal, Self, TypeVar
from urllib.parse import parse_qs, urlsplit

import grpc

# A script step: answer only once the fake stops (or the client has given up, where the
# protocol says so), as from a server too slow for any client's timeout.
HELD: Final = "held"
Held = Literal["held"]  # the type of a script step that is HELD

R = TypeVar("R")


class LoopbackFake(Generic[R]):
    """Lifecycle, request recording and held answers; a subclass opens the server.

    `requests` holds every request in arrival order; `script` the steps for the next ones
    (what a step means is the subclass's; `record` pops one as it records a request)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.requests: list[R] = []
        self.script: list[Any] = []
        self.port = 0
        self._stopping = threading.Event()
        self._held: list[threading.Event] = []
        self._started = False

    # --- what a subclass provides ---------------------------------------------------------

    def _open(self) -> int:
        """Start serving on 127.0.0.1 at a free port; return the port."""
        raise NotImplementedError

    def _close(self) -> None:
        """Stop serving and free the port."""
        raise NotImplementedError

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The fake's base URL, as the official clients take an endpoint override."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        assert not self._started, "a fake is started once"
        self._started = True
        self.port = self._open()
        return self

    def stop(self) -> None:
        with self.lock:
            self._stopping.set()
            held, self._held = self._held, []
        for call in held:
            call.set()
        if self._started:
            self._close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    # --- bookkeeping, for the subclasses' request handlers ---------------------------------

    def record(self, request: R) -> Any:
        """Record `request` and return the script's next step (None once the script is out)."""
        with self.lock:
            self.requests.append(request)
            return self.script.pop(0) if self.script else None

    def hold(self, gone: threading.Event | None = None) -> None:
        """Hold the current answer until the fake stops, or until `gone` is set (the client
        has ended the call). Call it outside `lock`: other calls are answered meanwhile."""
        released = gone or threading.Event()
        with self.lock:
            if self._stopping.is_set():
                return
            self._held.append(released)
        released.wait()


# --- HTTP -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpRequest:
    """One HTTP request as it arrived: header names as sent, the query's last values."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def header(self, name: str) -> str | None:
        """A header by name, whatever its case on the wire."""
        return next((value for key, value in self.headers.items() if key.lower() == name.lower()), None)


@dataclass
class HttpAnswer:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, status: int, value: Any, content_type: str = "application/json") -> HttpAnswer:
        return cls(status, json.dumps(value).encode(), content_type)


class HttpFake(LoopbackFake[HttpRequest]):
    """A threaded HTTP server: each request is recorded, then `answer(request, step)` answers
    it, `step` being the script's next step. A step of HELD is answered too (the call takes
    effect), but the answer goes out only once the fake stops."""

    def answer(self, request: HttpRequest, step: Any) -> HttpAnswer:
        raise NotImplementedError

    def _open(self) -> int:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                request = HttpRequest(
                    method=self.command,
                    path=parts.path,
                    query={key: values[-1] for key, values in parse_qs(parts.query).items()},
                    headers=dict(self.headers.items()),
                    body=self.rfile.read(length),
                )
                step = fake.record(request)
                answer = fake.answer(request, step)
                if step == HELD:
                    fake.hold()
                with contextlib.suppress(OSError):  # a held answer's client has gone
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    self.send_header("Content-Length", str(len(answer.body)))
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(answer.body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return int(self._server.server_address[1])

    def _close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- gRPC -------------------------------------------------------------------------------------


class GrpcFake(LoopbackFake[R]):
    """A gRPC server (plaintext, as the clients speak to a loopback endpoint) serving
    `handlers()`; a handler records with `record` and holds with `hold(gone)`, `gone` set by the
    call's end so that a held call also ends at the client's deadline."""

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        raise NotImplementedError

    def _open(self) -> int:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        self._server.add_generic_rpc_handlers(self.handlers())
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return port

    def _close(self) -> None:
        self._server.stop(grace=None)

    @staticmethod
    def call_ended(context: grpc.ServicerContext) -> threading.Event:
        """An event set when the call ends (the client's deadline, a cancel, the server stopping)."""
        ended = threading.Event()
        if not context.add_callback(ended.set):
            ended.set()  # it has ended already
        return ended
