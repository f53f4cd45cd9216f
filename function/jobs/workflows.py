"""Proxy job: start one Workflows execution per scheduled run, carrying the run's token.

Cloud Scheduler calling workflowexecutions.googleapis.com directly starts a new execution on
every retry. Routed through the deduplicating function instead, the execution is started
after the claim, and its `argument` carries run_id as the idempotency key plus the claim's
fence, so the workflow can check them (check_idempotency_token) before it changes state: a
lost response can still make the function start a second execution for the same run.

Body (set by the stack, authenticated by OIDC):
    {"workflow": "projects/P/locations/L/workflows/W", "argument": {...}}   argument optional
The execution argument (a JSON object the workflow receives as its params):
    {"idempotency_key": run_id, "fence": <int>, "job_name": ..., "schedule_time": RFC 3339,
     "attempt_id": ..., "payload": <body.argument or {}>}

Environment: WORKFLOWS_API_ENDPOINT (optional) overrides the endpoint, read as every proxy
job reads its own (exactly_once/endpoints.py): `http://<loopback>:port` is a plaintext
channel with no credentials, for tests only.

The executions_v1 client of google-cloud-workflows 1.23 ships gRPC transports only (no
REST), so the fake used by the tests is a loopback gRPC server.

The run records the execution's name and state (exactly_once/ledger/downstream.py);
`execution_state` asks for it again afterwards, for whoever follows the run's execution to its
end (exactly_once/delivery/following.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from exactly_once import RunContext, TerminalJobError, log_fields, structured_log
from exactly_once.delivery.following import register_follower
from exactly_once.endpoints import WORKFLOWS_ENDPOINT_ENV, ApiEndpoint, endpoint_from_env
from exactly_once.ledger.downstream import Downstream, DownstreamState
from exactly_once.once import OncePerInstance
from exactly_once.run_key import format_rfc3339
from exactly_once.targets.call_timeout import call_timeout
from exactly_once.targets.errors import downstream_call
from exactly_once.targets.resource_names import WORKFLOW_RESOURCE_NAME

# The kind of work this proxy starts, as the stack's config names the target: what its runs'
# records say they started, and what its follower is registered under.
WORKFLOW: Final = "workflow"

if TYPE_CHECKING:
    # Imported by the first run, not at start-up: the router imports every configured job's
    # module when the instance starts, and most of its requests are not runs of this job.
    from google.cloud.workflows.executions_v1 import Execution, ExecutionsClient

# The API rejects larger arguments; fail before the call, terminally.
MAX_ARGUMENT_BYTES = 32 * 1024
BODY_FIELDS = frozenset({"workflow", "argument"})


@dataclass(frozen=True)
class WorkflowRequest:
    workflow: str
    argument: dict[str, Any]

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> WorkflowRequest:
        """Validate up front: the body is the same on every retry, so a bad one is terminal."""
        workflow = body.get("workflow")
        if not isinstance(workflow, str) or not WORKFLOW_RESOURCE_NAME.match(workflow):
            raise TerminalJobError(
                "body field workflow must be projects/<project>/locations/<location>/workflows/<name>"
            )
        argument = body.get("argument", {})
        if not isinstance(argument, dict):
            raise TerminalJobError("body field argument must be a JSON object")
        return cls(workflow, argument)


ENDPOINT = endpoint_from_env(os.environ, WORKFLOWS_ENDPOINT_ENV)

# Built on first use, then shared by every request of the instance (see exactly_once/once.py).
_executions_client = OncePerInstance(lambda: _new_client(ENDPOINT))


def _new_client(endpoint: ApiEndpoint) -> ExecutionsClient:
    import grpc
    from google.cloud.workflows.executions_v1 import ExecutionsClient
    from google.cloud.workflows.executions_v1.services.executions.transports import ExecutionsGrpcTransport

    if endpoint.plaintext:
        assert endpoint.host is not None
        # A channel instance makes the transport skip credentials altogether.
        channel = grpc.insecure_channel(endpoint.host)
        return ExecutionsClient(transport=ExecutionsGrpcTransport(host=endpoint.host, channel=channel))
    options = {"api_endpoint": endpoint.host} if endpoint.host else None
    return ExecutionsClient(client_options=options)  # Application Default Credentials


def execution_argument(context: RunContext, payload: Mapping[str, Any]) -> str:
    """The idempotency token and its fence, as the workflow's params."""
    schedule_time = format_rfc3339(context.schedule_time)
    return json.dumps(
        {
            "idempotency_key": context.run_id,
            "fence": context.fence,
            "job_name": context.job_name,
            "schedule_time": schedule_time,
            "attempt_id": context.attempt_id,
            "payload": dict(payload),
        },
        separators=(",", ":"),
    )


def start_workflow_execution(context: RunContext) -> dict[str, str]:
    """The job handler: one CreateExecution, once (no client-side retry: a retry is a new
    delivery with a new fence, visible in logs), its timeout cut to what the attempt has left
    (exactly_once/targets/call_timeout.py)."""
    request = WorkflowRequest.from_body(context.json_body(BODY_FIELDS))
    argument = execution_argument(context, request.argument)
    if len(argument.encode()) > MAX_ARGUMENT_BYTES:
        raise TerminalJobError(f"execution argument exceeds {MAX_ARGUMENT_BYTES} bytes")
    starting = f"starting an execution of {request.workflow}"
    # Before the client library is imported (a first run's import can outlast a short limit):
    # an attempt with no time for a call releases its run at once.
    call_timeout(context, starting)
    from google.cloud.workflows.executions_v1 import Execution

    with downstream_call(starting):
        execution = _executions_client().create_execution(
            parent=request.workflow,
            execution=Execution(argument=argument),
            retry=None,
            timeout=call_timeout(context, starting),
        )
    context.downstream.started(_followed(execution))
    _log_started(context, request.workflow, execution)
    return {"execution": execution.name}


def execution_state(known: Downstream, timeout: float) -> Downstream:
    """The execution `known` names, as the Workflows Executions API reports it now: the
    follower of WORKFLOW work (exactly_once/delivery/following.py). One call, no retry."""
    return _followed(_executions_client().get_execution(name=known.name, retry=None, timeout=timeout))


def _followed(execution: Execution) -> Downstream:
    from google.cloud.workflows.executions_v1 import Execution

    states = {
        Execution.State.SUCCEEDED: DownstreamState.SUCCEEDED,
        Execution.State.FAILED: DownstreamState.FAILED,
        Execution.State.CANCELLED: DownstreamState.CANCELLED,
        # The execution's data is gone (its retention ended): how it ended cannot be known.
        Execution.State.UNAVAILABLE: DownstreamState.FAILED,
    }
    state = states.get(execution.state, DownstreamState.RUNNING)  # queued, active
    error = None
    if state.failed:
        error = execution.error.payload or execution.error.context or f"execution {execution.state.name}"
    return Downstream(WORKFLOW, str(execution.name), state, error)


def _log_started(context: RunContext, workflow: str, execution: Execution) -> None:
    fields = {
        "workflow": workflow,
        "execution": execution.name,
        log_fields.RUN_ID: context.run_id,
        log_fields.JOB: context.job_name,
        "attempt_id": context.attempt_id,
        "fence": context.fence,
    }
    structured_log.emit("INFO", "started a workflow execution", fields)


register_follower(WORKFLOW, execution_state)
