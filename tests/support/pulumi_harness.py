"""Run the stack's ComponentResource under Pulumi mocks and return what it registered.

No Pulumi CLI and no cloud: `pulumi.runtime.set_mocks` replaces the engine, and the mocks
answer with outputs shaped like Google Cloud's (service account emails, a run.app URI,
object generations), so outputs that feed other resources are realistic. Safe to call many
times in one pytest process: every call installs fresh mocks and waits for its own program.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

from infra.settings import PROJECT_NAME, REPO_ROOT, StackSettings, load_stack_settings
from infra.stack import COMPONENT_TYPE, ExactlyOnceScheduler

COMPONENT_NAME = "eos"
MOCK_STACK = "test"
DEFAULT_FUNCTION_DIR = REPO_ROOT / "function"


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


@dataclass(frozen=True)
class MockedStack:
    """Everything one mocked run produced."""

    resources: list[MockedResource]
    component_outputs: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def of_type(self, type_: str) -> list[MockedResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> MockedResource:
        found = self.of_type(type_)
        assert len(found) == 1, f"expected one {type_}, found {[r.name for r in found]}"
        return found[0]

    @property
    def component(self) -> MockedResource:
        return self.one(COMPONENT_TYPE)


class _GcpMocks(pulumi.runtime.Mocks):
    """Outputs = inputs plus what Google Cloud computes for the few types we read back."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.registered: list[tuple[str, str, dict[str, Any], dict[str, Any], bool]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        outputs = dict(inputs)
        project = inputs.get("project", self.project)
        if args.typ == "gcp:serviceaccount/account:Account":
            email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
            outputs.update(
                email=email,
                member=f"serviceAccount:{email}",
                name=f"projects/{project}/serviceAccounts/{email}",
            )
        elif args.typ == "gcp:storage/bucket:Bucket":
            outputs.setdefault("name", f"{args.name}-a1b2c3d")
            outputs["url"] = f"gs://{outputs['name']}"
        elif args.typ == "gcp:storage/bucketObject:BucketObject":
            # Generations are microsecond timestamps; derive one from the name so it is stable.
            outputs["generation"] = 1_700_000_000_000_000 + zlib.crc32(str(inputs.get("name")).encode())
            outputs["md5hash"] = "bW9jaw=="
        elif args.typ == "gcp:cloudfunctionsv2/function:Function":
            name, location = inputs["name"], inputs["location"]
            service_config = dict(inputs.get("serviceConfig", {}))
            service_config.update(
                uri=f"https://{name}-xyz-uc.a.run.app",
                service=f"projects/{project}/locations/{location}/services/{name}",
            )
            outputs.update(serviceConfig=service_config, url=service_config["uri"], state="ACTIVE")
        self.registered.append((args.typ, args.name, inputs, outputs, bool(args.custom)))
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """The stock mock monitor, plus the parent of each resource and component outputs."""

    def __init__(self, mocks: _GcpMocks) -> None:
        super().__init__(mocks)
        self.parents: dict[str, str] = {}
        self.registered_outputs: dict[str, dict[str, Any]] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self.parents[response.urn] = request.parent
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        from pulumi.runtime import rpc

        self.registered_outputs[request.urn] = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)


class _WarningLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def mock_stack(settings: StackSettings, function_dir: Path | None = None) -> MockedStack:
    """Run ExactlyOnceScheduler(settings) under mocks; return resources, outputs and warnings."""
    mocks = _GcpMocks(settings.project)
    monitor = _RecordingMonitor(mocks)
    log = _WarningLog()
    logger = logging.getLogger(f"{__name__}.engine")
    logger.addHandler(log)
    logger.propagate = False
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT_NAME, stack=MOCK_STACK, preview=False, logger=logger, monitor=monitor
    )

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        scheduler = ExactlyOnceScheduler(COMPONENT_NAME, settings, function_dir or DEFAULT_FUNCTION_DIR)
        # Awaiting every output makes the test wait until all resources are registered.
        return pulumi.Output.all(
            scheduler.function_uri,
            scheduler.job_names,
            scheduler.runtime_service_account_email,
            scheduler.invoker_service_account_email,
            scheduler.database_name,
            scheduler.runs_collection,
            scheduler.sample_workflows,
            *[
                o
                for o in (scheduler.token_check_uri, scheduler.workflow_service_account_email)
                if o is not None
            ],
        )

    try:
        program()
    finally:
        logger.removeHandler(log)

    urns = list(monitor.resources)
    resources = []
    for urn in urns:
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
            )
        )
    component_urn = next(r.urn for r in resources if r.type == COMPONENT_TYPE)
    return MockedStack(
        resources=resources,
        component_outputs=monitor.registered_outputs.get(component_urn, {}),
        warnings=log.messages,
    )


def run_mocked_stack(settings: StackSettings, function_dir: Path | None = None) -> list[MockedResource]:
    """Every resource the component registers (the component itself included), in order."""
    return mock_stack(settings, function_dir).resources


def dev_stack_resources() -> list[MockedResource]:
    """The dev stack as `pulumi up -s dev` would declare it."""
    return run_mocked_stack(load_stack_settings("dev"))
