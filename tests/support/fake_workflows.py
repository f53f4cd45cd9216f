"""A loopback Workflows Executions API: the real gRPC wire protocol, records executions.

google-cloud-workflows 1.23 gives executions_v1 only gRPC transports, so this is what the
client really speaks: unary CreateExecution on google.cloud.workflows.executions.v1.Executions
with the library's own request/response messages.
"""

from __future__ import annotations

import threading
import uuid
from concurrent import futures
from dataclasses import dataclass, field
from typing import Literal

import grpc
from google.cloud.workflows.executions_v1 import CreateExecutionRequest, Execution

from tests.support.google_rest_fake import HELD

SERVICE = "google.cloud.workflows.executions.v1.Executions"


@dataclass
class FakeWorkflows:
    """`failures` scripts the next calls: a status code fails the call before anything is
    started; ("lost", code) starts the execution and then fails, like a lost response; HELD
    starts it and answers only once the client has given up (its deadline) or the fake stops."""

    failures: list[grpc.StatusCode | tuple[str, grpc.StatusCode] | Literal["held"]] = field(
        default_factory=list
    )
    requests: list[CreateExecutionRequest] = field(default_factory=list)
    started: list[Execution] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _held: list[threading.Event] = field(default_factory=list)
    _server: grpc.Server | None = None
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeWorkflows:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        handler = grpc.unary_unary_rpc_method_handler(
            self._create_execution,
            request_deserializer=CreateExecutionRequest.deserialize,
            response_serializer=Execution.serialize,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"CreateExecution": handler}),)
        )
        self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        with self._lock:
            for call in self._held:
                call.set()
        if self._server is not None:
            self._server.stop(grace=None)

    def _create_execution(self, request: CreateExecutionRequest, context: grpc.ServicerContext) -> Execution:
        with self._lock:
            self.requests.append(request)
            failure = self.failures.pop(0) if self.failures else None
            if failure is None or failure == HELD or isinstance(failure, tuple):
                execution = Execution(
                    name=f"{request.parent}/executions/{uuid.uuid4()}",
                    argument=request.execution.argument,
                    state=Execution.State.ACTIVE,
                )
                self.started.append(execution)
        if failure is None:
            return execution
        if failure == HELD:
            ended = threading.Event()
            if not context.add_callback(ended.set):  # the client's deadline ends the call
                ended.set()  # it has ended already
            with self._lock:
                self._held.append(ended)
            ended.wait()
            return execution
        code = failure[1] if isinstance(failure, tuple) else failure
        context.abort(code, f"fake failure {code.name}")
        raise AssertionError("unreachable")  # abort raises
