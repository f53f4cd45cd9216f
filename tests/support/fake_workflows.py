"""A loopback Workflows Executions API: the real gRPC wire protocol, records executions.

google-cloud-workflows 1.23 gives executions_v1 only gRPC transports, so this is what the
client really speaks: unary CreateExecution on google.cloud.workflows.executions.v1.Executions
with the library's own request/response messages.
"""

from __future__ import annotations

import uuid

import grpc
from google.cloud.workflows.executions_v1 import CreateExecutionRequest, Execution

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

    @property
    def failures(self) -> list[Failure]:
        return self.script

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        handler = grpc.unary_unary_rpc_method_handler(
            self._create_execution,
            request_deserializer=CreateExecutionRequest.deserialize,
            response_serializer=Execution.serialize,
        )
        return (grpc.method_handlers_generic_handler(SERVICE, {"CreateExecution": handler}),)

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
