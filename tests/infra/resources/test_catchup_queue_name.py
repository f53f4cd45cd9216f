"""The catch-up queue's name: every creation of the queue gets a name of its own (Cloud Tasks
keeps a deleted queue's name for days, and a create of it meanwhile may seem to succeed and has
not), and everything that refers to the queue refers to the name it was created with, under
Pulumi's mocks: its grant, the job table's catch-up deliveries in both regions, the stack
output `ops backfill` reads."""

from __future__ import annotations

from typing import Any

import pytest

from exactly_once.audit.config import AuditConfig
from exactly_once.delivery.scheduler_request import parse_rfc3339
from infra.plan.catchup import queue_path
from policy.scheduler_guardrails.rules.config.names import TASK_QUEUE_ID, StackNames
from tests.infra.conftest import PROJECT, REGION, SECOND_REGION, build, every_option_values
from tests.support.stack_tables import shipped_table
from tools.mocked_program import STATIC, GcpMocks, MockedResource, MockedStack, mock_stack

QUEUE = "gcp:cloudtasks/queue:Queue"
QUEUE_MEMBER = "gcp:cloudtasks/queueIamMember:QueueIamMember"
# When the queues of the second creation were created: some days after the first's.
LATER = "2026-01-04T09:30:00Z"


class CreatedAt(GcpMocks):
    """The mocks, with every `time.Static` recording `created` as its creation time: a stack
    whose queues are created at another moment than GcpMocks' (after a `pulumi destroy`, or
    after catch-up was switched off and on again)."""

    def __init__(self, project: str, created: str) -> None:
        super().__init__(project)
        self.created = created

    def _computed(self, typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
        outputs = super()._computed(typ, name, inputs)
        if typ == STATIC:
            outputs["rfc3339"] = self.created
        return outputs


def _queues(stack: MockedStack) -> dict[str, MockedResource]:
    return {queue.inputs["location"]: queue for queue in stack.of_type(QUEUE)}


def _created(stack: MockedStack, queue: MockedResource) -> int:
    """When the Static created with `queue` says the queue was created, in unix seconds."""
    static = stack.named(STATIC, f"{queue.name}-created")
    return int(parse_rfc3339(static.outputs["rfc3339"]).timestamp())


@pytest.fixture(scope="module")
def recreated() -> MockedStack:
    settings = build(every_option_values())
    return mock_stack(settings, mocks=CreatedAt(settings.project, LATER))


def test_every_creation_of_the_queue_gets_a_name_of_its_own(
    every_option_stack: MockedStack, recreated: MockedStack
) -> None:
    settings = build(every_option_values())
    first, again = _queues(every_option_stack), _queues(recreated)
    assert sorted(first) == sorted(again) == sorted([REGION, SECOND_REGION])
    for region in (REGION, SECOND_REGION):
        assert first[region].inputs["name"] != again[region].inputs["name"]
        for stack, queues in ((every_option_stack, first), (recreated, again)):
            # Named after the time recorded with it, which a new queue records anew.
            assert queues[region].inputs["name"] == settings.names.task_queue_id(
                _created(stack, queues[region])
            )
    assert again[REGION].inputs["name"].endswith(f"-{int(parse_rfc3339(LATER).timestamp())}")


def test_the_time_is_recorded_with_the_queue_and_replaced_with_it(every_option_stack: MockedStack) -> None:
    """What replaces a queue (another project or location) replaces the time it is named after."""
    for region, queue in _queues(every_option_stack).items():
        static = every_option_stack.named(STATIC, f"{queue.name}-created")
        assert static.inputs["triggers"] == {"project": PROJECT, "location": region}
        assert static.parent == queue.parent


@pytest.mark.parametrize("creation", ["first", "again"])
def test_everything_that_refers_to_the_queue_names_the_name_it_was_created_with(
    creation: str, every_option_stack: MockedStack, recreated: MockedStack
) -> None:
    """For either creation: nothing refers to a name the queue might have had instead."""
    stack = every_option_stack if creation == "first" else recreated
    settings = build(every_option_values())
    queues = _queues(stack)
    paths = {region: queue_path(settings, queue.outputs["name"], region) for region, queue in queues.items()}
    # The runtime's grant to add tasks: on each region's queue, by its name.
    members = {m.inputs["location"]: m.inputs["name"] for m in stack.of_type(QUEUE_MEMBER)}
    assert members == {region: queue.outputs["name"] for region, queue in queues.items()}
    # The job table both functions ship: each region's deliveries through its own queue.
    table = shipped_table(stack.resources)
    assert table.audit is not None
    delivered = {r.region: r.queue for r in AuditConfig.from_raw(table.audit).redeliveries}
    assert delivered == paths
    # The stack output `ops backfill --since/--until` sends through: the first region's queue.
    assert stack.component_outputs["catchupQueue"] == paths[REGION]


@pytest.mark.parametrize("stack", ["dev", "x" * 100, "Team.Platform_EU-West"])
def test_a_queue_id_fits_cloud_tasks_for_any_stack_name_and_any_creation_time(stack: str) -> None:
    for created in (0, 1767225600, 9_999_999_999):
        queue_id = StackNames(stack).task_queue_id(created)
        assert TASK_QUEUE_ID.match(queue_id) and queue_id.endswith(f"-{created}"), queue_id
    assert StackNames("dev").task_queue_id(1767225600) == "eos-dev-catchup-1767225600"
    with pytest.raises(ValueError, match="unix seconds"):
        StackNames("dev").task_queue_id(-1)
