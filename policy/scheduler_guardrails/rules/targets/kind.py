"""What a target kind is: one thing a job can start per scheduled run, through the function.

A job with a target (`workflow:`, `cloudRunJob:`, `bigquery:`) runs the kind's proxy handler in
the function (function/jobs/), which starts exactly one downstream execution per run. Each kind
is one module of this package and one `TargetKind` in rules/targets/registry.py; everything the
rest of the stack knows about a kind it asks that object: the config keys and their parsing,
the body Cloud Scheduler sends, the function's environment table, the resources the runtime
account is granted on, the APIs to enable and the API name the timing advisories show. The
roles themselves, those on a kind's resources and the project roles a kind cannot do without,
are rows of rules/config/grants.py. No Pulumi here: the settings, the policy tests and the docs
read the same answers the program deploys from.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..config.access import ResourceGrant
from ..config.names import StackNames
from ..config.problems import ConfigProblems


@dataclass(frozen=True)
class SampleJob:
    """The job `samples: true` adds for a kind (infra/settings/samples.py): its name, its
    schedule and the value of its `key` setting."""

    name: str
    schedule: str
    setting: Mapping[str, Any]


@dataclass(frozen=True)
class Placement:
    """Where the stack deploys: what a kind needs to name its downstream resources."""

    project: str
    region: str
    names: StackNames


class TargetKind:
    """One kind of target. Subclasses set the class attributes and override what applies."""

    # The job's config key (`cloudRunJob`), and the keys inside it.
    key: ClassVar[str]
    # Where the kind stands in lists of kinds (the docs' tables): found kinds have no order of
    # their own, and a table that reorders itself when a kind is added reads as a change.
    position: ClassVar[int]
    keys: ClassVar[tuple[str, ...]]
    # What each of `keys` is and means, (type, meaning), for docs/stack.md's job-fields table:
    # held here so that the table loses a deleted kind's rows with its module.
    field_meanings: ClassVar[Mapping[str, tuple[str, str]]]
    # The function's proxy handler for this kind (module:callable).
    handler: ClassVar[str]
    # The API as the timing advisories name it ("BigQuery").
    service: ClassVar[str]
    # APIs enabled only when some job runs this kind's handler.
    apis: ClassVar[tuple[str, ...]] = ()
    # The function's environment variable holding the kind's per-job table, if it has one, and
    # the shape of one job's entry in it, for the docs' table of the function's environment.
    environment_variable: ClassVar[str | None] = None
    environment_entry: ClassVar[str] = ""
    # Whether Cloud Scheduler sends a JSON body for a job of this kind.
    sends_body: ClassVar[bool] = False
    # What to tell a user who set `body` on a job of this kind.
    body_hint: ClassVar[str] = "the function reads its settings from {prefix}.{key}"
    # Whether the sample the stack deploys for this kind calls the token check (so a stack
    # with one deploys it), and from outside any VPC network (so its ingress must allow that).
    sample_calls_token_check: ClassVar[bool] = False
    sample_calls_from_outside_network: ClassVar[bool] = False
    # The job `samples: true` adds for the kind, if it shows one off.
    sample_job: ClassVar[SampleJob | None] = None

    @property
    def handler_module(self) -> str:
        return self.handler.split(":")[0]

    def parse(self, raw: Any, key: str, errors: ConfigProblems) -> object | None:
        """The typed target from the job's `raw` value at config `key`, or None with errors."""
        raise NotImplementedError

    def owns(self, target: object) -> bool:
        """Whether `target` is a value this kind's `parse` returns."""
        raise NotImplementedError

    def is_sample(self, target: object) -> bool:
        """Whether `target` is the stack's sample (`sample: true`), which the program deploys."""
        return getattr(target, "sample", False) is True

    def body_names_sample(self, target: object) -> bool:
        """Whether Cloud Scheduler's body for `target` names the sample the program deploys for
        the job, a name known only once the program has chosen it (`sample_resource`)."""
        return False

    def sample_resource(self, job_name: str, where: Placement) -> str:
        """The full resource name of the sample the stack deploys for `job_name`."""
        raise NotImplementedError

    def sample_body(self, target: object, resource: str) -> dict[str, Any]:
        """The body Cloud Scheduler sends for `target` once its sample's `resource` is known."""
        raise NotImplementedError

    def body(self, target: object) -> dict[str, Any] | None:
        """The body Cloud Scheduler sends for `target`, when the config alone decides it."""
        return None

    def table_entry(self, target: object, job_name: str, where: Placement) -> Any:
        """The job's entry in `environment_variable`'s table (a job spec with `to_json`)."""
        raise NotImplementedError

    def grants(self, target: object, job_name: str, where: Placement) -> Iterator[ResourceGrant]:
        """The runtime account's resource-scoped roles for `target`."""
        return iter(())

    def untargeted_problem(
        self, job_name: str, body: Mapping[str, Any] | None, index: int, handler_key: str
    ) -> tuple[str, str] | None:
        """A job that runs this kind's handler without setting `key`: the config key to edit and
        what is wrong, or None when such a job is fine (its body says what to start).
        `handler_key` is where its handler was set (the job's own or the stack's default)."""
        return handler_key, f"{self.handler} runs a job's {self.key} setting; set jobs[{index}].{self.key}"


def sample_or_named(raw: Mapping[str, Any], key: str, named: str, errors: ConfigProblems) -> bool | None:
    """`sample: true` (the stack deploys a sample) or the `named` key, exactly one of them."""
    sample = raw.get("sample", False)
    if not isinstance(sample, bool):
        errors.append(f"{errors.key(f'{key}.sample')}: expected true or false, got {sample!r}")
        return None
    if sample and named in raw:
        errors.append(f"{errors.key(key)}: set either sample: true or {named}, not both")
    elif not sample and named not in raw:
        errors.append(f"{errors.key(key)}: set sample: true (deploy the stack's sample) or {named}")
    return sample is True
