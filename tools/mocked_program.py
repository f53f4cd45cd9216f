"""Run the stack's ComponentResource under Pulumi mocks and return what it registered.

No Pulumi CLI and no cloud: `pulumi.runtime.set_mocks` replaces the engine, and the mocks
answer with outputs shaped like Google Cloud's (service account emails, a run.app URI,
object generations), so outputs that feed other resources are realistic. Safe to call many
times in one pytest process: every call installs fresh mocks and waits for its own program.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import runpy
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.output import Unknown
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

from infra.component import COMPONENT_TYPE, ExactlyOnceScheduler, ExactlyOnceSchedulerArgs, export_outputs
from infra.config.paths import FUNCTION_DIR
from infra.config.schema import project_name
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.names import COMPONENT_NAME

MOCK_STACK = "test"
# What gcp.organizations.get_project answers for every project under these mocks.
PROJECT_NUMBER = "123456789012"
GET_PROJECT = "gcp:organizations/getProject:getProject"
SLEEP = "time:index/sleep:Sleep"
OFFSET = "time:index/offset:Offset"
STATIC = "time:index/static:Static"
STACK_REFERENCE = "pulumi:pulumi:StackReference"
# In preview the engine knows no output a provider computes; these mocks then answer them so.
UNKNOWN = rpc.UNKNOWN


@dataclass(frozen=True)
class MockedResource:
    """One registered resource: `inputs` as the engine received them (camelCase keys)."""

    type: str
    name: str
    urn: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    parent: str = ""
    custom: bool = True
    # Resource options as the engine received them.
    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    # "create"/"update"/"delete" -> the duration string the option set ("60m"); absent: unset.
    custom_timeouts: dict[str, str] = field(default_factory=dict)


def pause_seconds(resource: MockedResource) -> int:
    """A `pulumiverse_time.Sleep`'s createDuration in seconds ("180s" -> 180)."""
    assert resource.type == SLEEP, resource.type
    duration = str(resource.inputs["createDuration"])
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return int(duration[:-1])


@dataclass(frozen=True)
class MockedStack:
    """Everything one mocked run produced."""

    resources: list[MockedResource]
    component_outputs: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    # URN -> the URNs it waits for (explicit depends_on and every input's resources).
    dependencies: dict[str, list[str]] = field(default_factory=dict)

    def of_type(self, type_: str) -> list[MockedResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> MockedResource:
        found = self.of_type(type_)
        assert len(found) == 1, f"expected one {type_}, found {[r.name for r in found]}"
        return found[0]

    def named(self, type_: str, name: str) -> MockedResource:
        found = [r for r in self.of_type(type_) if r.name == name]
        assert len(found) == 1, f"expected one {type_} {name}, found {len(found)}"
        return found[0]

    def by_urn(self, urn: str) -> MockedResource:
        return next(r for r in self.resources if r.urn == urn)

    def waits_for(self, urn: str) -> set[str]:
        """Every URN that `urn` waits for, directly or through what it waits for."""
        return transitive_dependencies(self.dependencies, urn)

    def pauses_before(self, urn: str, at_least: int) -> list[MockedResource]:
        """The pauses of `at_least` seconds or more in the dependency chain of `urn`."""
        waited = [self.by_urn(other) for other in self.waits_for(urn)]
        return [r for r in waited if r.type == SLEEP and pause_seconds(r) >= at_least]

    @property
    def component(self) -> MockedResource:
        return self.one(COMPONENT_TYPE)


class GcpMocks(pulumi.runtime.Mocks):
    """Outputs = inputs plus what Google Cloud computes for the few types we read back.

    With `preview`, every value a provider computes is unknown, as in a first `pulumi preview`
    of a fresh stack: emails, members, URIs, service names, generations, bucket names, ids.
    With `preview` and `deployed`, a later preview of a deployed, unchanged stack: every value
    known, as the state holds it. `previous_outputs` are what a StackReference reads: the
    outputs of the stack's last update (none: a stack never deployed). The engine reads them
    in preview too.
    """

    def __init__(
        self,
        project: str,
        preview: bool = False,
        previous_outputs: dict[str, Any] | None = None,
        deployed: bool = False,
    ) -> None:
        self.project = project
        self.preview = preview
        self.deployed = deployed
        self.previous_outputs = dict(previous_outputs or {})
        self.registered: list[tuple[str, str, dict[str, Any], dict[str, Any], bool]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        outputs = self._computed(args.typ, args.name, inputs)
        if self.preview and not self.deployed and args.typ != STACK_REFERENCE:
            outputs = _unknown_where_computed(inputs, outputs)
        self.registered.append((args.typ, args.name, inputs, outputs, bool(args.custom)))
        return (None if self.preview and not self.deployed else f"{args.name}-id"), outputs

    def _computed(self, typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
        outputs = dict(inputs)
        project = inputs.get("project", self.project)
        if typ == "gcp:serviceaccount/account:Account":
            email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
            outputs.update(
                email=email,
                member=f"serviceAccount:{email}",
                name=f"projects/{project}/serviceAccounts/{email}",
            )
        elif typ == "gcp:storage/bucket:Bucket":
            outputs.setdefault("name", f"{name}-a1b2c3d")
            outputs["url"] = f"gs://{outputs['name']}"
        elif typ == "gcp:storage/bucketObject:BucketObject":
            # Generations are microsecond timestamps; derive one from the name so it is stable.
            outputs["generation"] = 1_700_000_000_000_000 + zlib.crc32(str(inputs.get("name")).encode())
            outputs["md5hash"] = "bW9jaw=="
        elif typ == "gcp:cloudfunctionsv2/function:Function":
            name, location = inputs["name"], inputs["location"]
            service_config = dict(inputs.get("serviceConfig", {}))
            service_config.update(
                uri=f"https://{name}-xyz-uc.a.run.app",
                service=f"projects/{project}/locations/{location}/services/{name}",
            )
            outputs.update(serviceConfig=service_config, url=service_config["uri"], state="ACTIVE")
        elif typ == SLEEP:
            outputs["id"] = "2026-01-01T00:00:00Z"
        elif typ == STACK_REFERENCE:
            outputs.update(outputs=dict(self.previous_outputs), secretOutputNames=[])
        elif typ == OFFSET:
            outputs["rfc3339"] = f"2026-01-01T00:{int(inputs.get('offsetMinutes', 0)):02d}:00Z"
        elif typ == STATIC:
            outputs["rfc3339"] = "2026-01-01T00:00:00Z"
        return outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """Data sources: Pulumi reads them in preview too, so their answers are always known."""
        self.calls.append((args.token, dict(args.args)))
        if args.token == GET_PROJECT:
            project = args.args.get("projectId") or self.project
            return {"projectId": project, "number": PROJECT_NUMBER, "name": project}, []
        raise NotImplementedError(f"no mock answer for {args.token}")


def transitive_dependencies(dependencies: dict[str, list[str]], urn: str) -> set[str]:
    """Every URN reachable from `urn` in the recorded dependency graph (itself excluded)."""
    seen: set[str] = set()
    pending = list(dependencies.get(urn, []))
    while pending:
        current = pending.pop()
        if current not in seen:
            seen.add(current)
            pending.extend(dependencies.get(current, []))
    return seen


def _unknown_where_computed(inputs: Any, outputs: Any) -> Any:
    """`outputs` with every value the provider computed (not given as an input) unknown."""
    if isinstance(outputs, dict) and isinstance(inputs, dict):
        return {
            key: _unknown_where_computed(inputs[key], value) if key in inputs else UNKNOWN
            for key, value in outputs.items()
        }
    return outputs if outputs == inputs else UNKNOWN


def as_policy_value(value: Any) -> Any:
    """A recorded value with preview-time unknowns as the policy SDK's unknown sentinel."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    if isinstance(value, Unknown) or value == UNKNOWN:
        return UNKNOWN_STRING_VALUE
    if isinstance(value, dict):
        return {k: as_policy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_policy_value(v) for v in value]
    return value


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The stock mock monitor, plus the parent of each resource and component outputs."""

    def __init__(self, mocks: GcpMocks) -> None:
        super().__init__(mocks)
        self.parents: dict[str, str] = {}
        self.dependencies: dict[str, list[str]] = {}
        # URN -> the resource options as the engine received them.
        self.options: dict[str, dict[str, Any]] = {}
        self.registered_outputs: dict[str, dict[str, Any]] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        self.parents[response.urn] = request.parent
        self.dependencies[response.urn] = list(request.dependencies)
        timeouts = request.customTimeouts
        self.options[response.urn] = {
            "protect": bool(request.protect),
            "retain_on_delete": bool(request.retainOnDelete),
            "delete_before_replace": bool(request.deleteBeforeReplace),
            "custom_timeouts": {
                kind: getattr(timeouts, kind)
                for kind in ("create", "update", "delete")
                if getattr(timeouts, kind)
            },
        }
        return response

    def ReadResource(self, request: Any) -> Any:
        """A read (a StackReference): no options, but a parent and dependencies like any other."""
        response = super().ReadResource(request)  # type: ignore[no-untyped-call]
        self.parents[response.urn] = request.parent
        self.dependencies[response.urn] = list(request.dependencies)
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        from pulumi.runtime import rpc

        self.registered_outputs[request.urn] = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]


class _WarningLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_under_mocks(
    program: Callable[[], pulumi.Output[Any]],
    mocks: GcpMocks,
    *,
    project: str,
    stack: str = MOCK_STACK,
    preview: bool = False,
) -> tuple[list[MockedResource], RecordingMonitor, list[str]]:
    """Run a Pulumi program under `mocks`: every resource it registers (in order), the monitor
    that saw them (parents, dependencies, registered outputs) and the engine's warnings.
    `program` must return an Output of everything it declares, so the run waits for them all."""
    monitor = RecordingMonitor(mocks)
    log = _WarningLog()
    logger = logging.getLogger(f"{__name__}.engine")
    logger.addHandler(log)
    logger.propagate = False
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=preview, logger=logger, monitor=monitor
    )
    try:
        pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    except BaseException:
        _mark_failed_outputs_seen()
        raise
    finally:
        logger.removeHandler(log)
    resources = []
    for urn in monitor.resources:
        typ = urn.split("::")[2].split("$")[-1]
        name = urn.split("::")[3]
        match = next(r for r in mocks.registered if r[0] == typ and r[1] == name)
        resources.append(
            MockedResource(
                type=typ,
                name=name,
                urn=urn,
                inputs=match[2],
                outputs=match[3],
                parent=monitor.parents.get(urn, ""),
                custom=match[4],
                **monitor.options.get(urn, {}),
            )
        )
    return resources, monitor, log.messages


def mock_stack(
    settings: StackSettings,
    function_dir: Path | None = None,
    *,
    preview: bool = False,
    stack: str = MOCK_STACK,
    mocks: GcpMocks | None = None,
    name: str = COMPONENT_NAME,
) -> MockedStack:
    """Run ExactlyOnceScheduler(name, settings) under mocks; return resources, outputs and warnings.

    `preview`: as a first `pulumi preview` sees it, every computed output unknown.
    `mocks`: other answers than GcpMocks' (a failed function, a stack's previous outputs)."""

    def program() -> pulumi.Output[Any]:
        scheduler = ExactlyOnceScheduler(
            name, ExactlyOnceSchedulerArgs(settings, function_dir or FUNCTION_DIR)
        )
        export_outputs(scheduler)
        return pulumi.Output.all(*scheduler.outputs.values())

    mocks = mocks or GcpMocks(settings.project, preview=preview)
    resources, monitor, warnings = run_under_mocks(
        program, mocks, project=project_name(), stack=stack, preview=mocks.preview
    )
    component_urn = next(r.urn for r in resources if r.type == COMPONENT_TYPE)
    return MockedStack(
        resources=resources,
        component_outputs=monitor.registered_outputs.get(component_urn, {}),
        warnings=warnings,
        dependencies=monitor.dependencies,
    )


def run_mocked_stack(
    settings: StackSettings, function_dir: Path | None = None, *, preview: bool = False
) -> list[MockedResource]:
    """Every resource the component registers (the component itself included), in order."""
    return mock_stack(settings, function_dir, preview=preview).resources


def run_main(pulumi_config: dict[str, str], mocks: GcpMocks, project: str | None = None) -> dict[str, Any]:
    """Run __main__.py as `pulumi up` would, under mocks; collect resource types and exports."""
    from pulumi.runtime.settings import get_root_resource

    from infra.config.schema import REPO_ROOT

    pulumi.runtime.set_mocks(mocks, project=project or project_name(), stack=MOCK_STACK, preview=False)
    runtime_config.set_all_config(pulumi_config)
    root = get_root_resource()
    assert isinstance(root, pulumi.runtime.stack.Stack)
    root.outputs.clear()
    exports: dict[str, Any] = {}

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def program() -> pulumi.Output[Any]:
        runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")
        return pulumi.Output.all(**root.outputs).apply(exports.update)

    try:
        program()
    except BaseException:
        _mark_failed_outputs_seen()
        raise
    return exports


def _mark_failed_outputs_seen() -> None:
    """A program that fails (a refused region change, a bad setting) leaves every output that
    waited on the failure holding the same error, never retrieved, and asyncio logs a traceback
    for each when it is destroyed: at the worker's exit, outside any test, over a thousand for
    one refused change. The error was raised to the caller once, so every future that ended
    with an exception is marked seen (`exception()` does that): the program's, since a test
    process runs no other asyncio work beside a mocked program. The tasks still pending on the
    failure (registrations waiting on the refused output) are run to their end first: marked
    only as they stood when the error was raised, they failed later, each with its traceback."""
    loop = asyncio.get_event_loop()
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if pending and not loop.is_running():
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    for held in gc.get_objects():
        if isinstance(held, asyncio.Future) and held.done() and not held.cancelled():
            held.exception()
