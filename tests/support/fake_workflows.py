"""A loopback Workflows Executions API: the real gRPC wire protocol, records executions.

google-cloud-workflows 1.23 gives executions_v1 only gRPC transports, so this is what the
client really speaks: unary CreateExecution and GetExecution on
google.cloud.workflows.executions.v1.Executions with the library's own request/response
messages. An execution stays ACTIVE until the test ends it (`finish`).
"""

from __future__ import annotations

import uuid

import grpc
from google.cloud.workflows.executions_v1 import CreateExecutionRequest, Execution, GetExecutionRequest

from tests.support.loopback_fake import HELD, GrpcFake, Held

SERVICE = "google.cloud.workflows.executions.v1.Executions"

Failure = grpc.StatusCode | tuple[str, grpc.StatusCode] | Held | None


class FakeWorkflows(GrpcFake[CreateExecutionRequest]):
    """`failures` (the fake's `script`) scripts the next calls: a status code fails the call
    before anything is started; ("lost", code) starts the execution and then fails, like a lost
    response; HELD starts it and answers only once the client has given up (its deadline) or
    the fake stops. `requests` holds every CreateExecutionRequest, `started` the executions."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[Execution] = []
        self.gets = 0  # GetExecution calls

    @property
    def failures(self) -> list[Failure]:
        return self.script

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        handler = grpc.unary_unary_rpc_method_handler(
            self._create_execution,
            request_deserializer=CreateExecutionRequest.deserialize,
            response_serializer=Execution.serialize,
        )
        get = grpc.unary_unary_rpc_method_handler(
            self._get_execution,
            request_deserializer=GetExecutionRequest.deserialize,
            response_serializer=Execution.serialize,
        )
        return (
            grpc.method_handlers_generic_handler(SERVICE, {"CreateExecution": handler, "GetExecution": get}),
        )

    def finish(self, name: str, state: int, error: str = "") -> None:
        """End the execution `name` in `state`, with `error` as its error payload."""
        with self.lock:
            execution = next(e for e in self.started if e.name == name)
            execution.state = Execution.State(state)
            if error:
                execution.error = Execution.Error(payload=error, context="fake workflow step")

    def _get_execution(self, request: GetExecutionRequest, context: grpc.ServicerContext) -> Execution:
        with self.lock:
            self.gets += 1
            found = next((e for e in self.started if e.name == request.name), None)
            if found is not None:
                copy: Execution = Execution.deserialize(Execution.serialize(found))
                return copy
        context.abort(grpc.StatusCode.NOT_FOUND, f"execution {request.name} not found")
        raise AssertionError("unreachable")

    def _create_execution(self, request: CreateExecutionRequest, context: grpc.ServicerContext) -> Execution:
        with self.lock:
            failure: Failure = self.record(request)
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
            self.hold(self.call_ended(context))  # the client's deadline ends the call
            return execution
        code = failure[1] if isinstance(failure, tuple) else failure
        context.abort(code, f"fake failure {code.name}")
        raise AssertionError("unreachable")  # abort raises
