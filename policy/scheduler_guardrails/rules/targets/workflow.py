"""`workflow:` — one Workflows execution per scheduled run (function/jobs/workflows.py).

Either `sample: true` (the stack deploys infra/samples/workflow.yaml for the job, so its
resource name is known only to the Pulumi program) or `name`, an existing workflow's resource
name. `argument` becomes the body's `argument`, which the workflow receives as `args.payload`.
A job may also run the Workflows proxy without `workflow:`, by sending its body itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from exactly_once.targets.resource_names import WORKFLOW_RESOURCE_NAME

from ..config.problems import ConfigProblems
from .kind import Placement, SampleJob, TargetKind

# The proxy job (function/jobs/workflows.py) every job of this kind runs.
WORKFLOWS_HANDLER: Final = "jobs.workflows:start_workflow_execution"
WORKFLOWS_API: Final = "workflows.googleapis.com"
# The function starts executions through the Executions API, which enabling Workflows does not.
EXECUTIONS_API: Final = "workflowexecutions.googleapis.com"
KEYS: Final = ("sample", "name", "argument")


def workflow_resource_name(project: str, region: str, workflow: str) -> str:
    """A workflow's full resource name, as a job's body names it."""
    return f"projects/{project}/locations/{region}/workflows/{workflow}"


@dataclass(frozen=True)
class WorkflowTarget:
    sample: bool
    name: str | None = None
    argument: Mapping[str, Any] | None = None

    def body(self, workflow: str) -> dict[str, Any]:
        """The body the Workflows proxy reads, for the workflow `workflow`."""
        body: dict[str, Any] = {"workflow": workflow}
        if self.argument is not None:
            body["argument"] = dict(self.argument)
        return body


class WorkflowKind(TargetKind):
    key: ClassVar[str] = "workflow"
    position: ClassVar[int] = 1
    keys: ClassVar[tuple[str, ...]] = KEYS
    field_meanings: ClassVar[Mapping[str, tuple[str, str]]] = {
        "sample": (
            "boolean",
            "`true`: deploy the sample workflow for this job (plus the token check). The handler "
            f"defaults to `{WORKFLOWS_HANDLER}` (any other is rejected) and the "
            "body is built by the stack, so `body` must not be set.",
        ),
        "name": (
            "string",
            "Instead of `sample`: an existing workflow, `projects/<p>/locations/<l>/workflows/<w>`; "
            "no sample is deployed. Exactly one of `sample: true` and `name`. Without a `workflow` "
            f"setting, a job run by `{WORKFLOWS_HANDLER}` must have a body "
            '`{"workflow": "projects/…/workflows/…", "argument"?: {...}}`.',
        ),
        "argument": (
            "object",
            "Sent as the body's `argument`; the workflow receives it as `args.payload`.",
        ),
    }
    handler: ClassVar[str] = WORKFLOWS_HANDLER
    service: ClassVar[str] = "Workflows"
    apis: ClassVar[tuple[str, ...]] = (WORKFLOWS_API, EXECUTIONS_API)
    sends_body: ClassVar[bool] = True
    sample_calls_token_check: ClassVar[bool] = True
    # Through the Workflows proxy to the sample workflow, which checks the run's token before
    # its state-changing step.
    sample_job: ClassVar[SampleJob | None] = SampleJob(
        "workflow-proxy-demo", "30 * * * *", {"sample": True, "argument": {"report": "hourly"}}
    )
    body_hint: ClassVar[str] = (
        "a job with a workflow sends the workflow body; put the workflow's input in "
        "{prefix}.workflow.argument instead"
    )

    def owns(self, target: object) -> bool:
        return isinstance(target, WorkflowTarget)

    def body_names_sample(self, target: object) -> bool:
        return self.is_sample(target)

    def sample_resource(self, job_name: str, where: Placement) -> str:
        return workflow_resource_name(where.project, where.region, where.names.workflow_name(job_name))

    def sample_body(self, target: object, resource: str) -> dict[str, Any]:
        assert isinstance(target, WorkflowTarget)
        return target.body(resource)

    def body(self, target: object) -> dict[str, Any] | None:
        assert isinstance(target, WorkflowTarget)
        return target.body(target.name) if target.name is not None else None

    def parse(self, raw: Any, key: str, errors: ConfigProblems) -> WorkflowTarget | None:
        """Exactly one of `sample: true` or `name`, plus an optional `argument` object."""
        if not isinstance(raw, Mapping):
            errors.append(
                f"{errors.key(key)}: expected an object such as {{sample: true}} or "
                f"{{name: projects/<p>/locations/<l>/workflows/<w>}}, got {raw!r}"
            )
            return None
        before = len(errors)
        errors.extend(f"{errors.key(f'{key}.{k}')}: unknown workflow key" for k in raw if k not in KEYS)
        sample = raw.get("sample", False)
        if not isinstance(sample, bool):
            errors.append(f"{errors.key(f'{key}.sample')}: expected true or false, got {sample!r}")
        name = raw.get("name")
        if name is not None and (not isinstance(name, str) or not WORKFLOW_RESOURCE_NAME.match(name)):
            errors.append(
                f"{errors.key(f'{key}.name')}: {name!r} is not projects/<project>/locations/<location>/"
                "workflows/<workflow>"
            )
        if sample is True and name is not None:
            errors.append(f"{errors.key(key)}: set either sample: true or name, not both")
        elif sample is not True and name is None and len(errors) == before:
            errors.append(
                f"{errors.key(key)}: set sample: true (deploy the sample workflow) or name "
                "(an existing workflow's projects/<p>/locations/<l>/workflows/<w>)"
            )
        argument = raw.get("argument")
        if argument is not None and not isinstance(argument, Mapping):
            errors.append(f"{errors.key(f'{key}.argument')}: expected a JSON object, got {argument!r}")
        if len(errors) > before:
            return None
        return WorkflowTarget(
            sample=sample is True, name=name, argument=dict(argument) if argument is not None else None
        )

    def untargeted_problem(
        self, job_name: str, body: Mapping[str, Any] | None, index: int, handler_key: str
    ) -> tuple[str, str] | None:
        """Without `workflow:`, the job's own body must be what the proxy reads; a wrong body
        would only show as a terminal failure at run time."""
        key = f"jobs[{index}].body"
        body = body or {}
        workflow = body.get("workflow")
        if not isinstance(workflow, str) or not WORKFLOW_RESOURCE_NAME.match(workflow):
            return key, (
                f"job {job_name!r} runs {WORKFLOWS_HANDLER}, which needs body.workflow = "
                "projects/<p>/locations/<l>/workflows/<w> (or set workflow: {sample: true} / {name: ...})"
            )
        if set(body) - {"workflow", "argument"} or not isinstance(body.get("argument", {}), Mapping):
            return key, (
                f"job {job_name!r}: the Workflows proxy body is {{workflow, argument?: object}}, "
                f"got fields {sorted(body)}"
            )
        return None


KIND: Final = WorkflowKind()
