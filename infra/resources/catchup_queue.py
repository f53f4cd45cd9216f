"""The Cloud Tasks queue the missed-run audit delivers missed runs through, and the two
grants that let the function use it (infra/plan/catchup.py says why Cloud Tasks).

Each queue is named after when it was created (StackNames.task_queue_id), recorded by a
`time.Static` that is created, and replaced, with it: Cloud Tasks keeps a deleted queue's name
for days, during which a create of that name may seem to succeed and has not, so a queue
created again under its old name (after `pulumi destroy` and `up`, or catch-up switched off
and on) would leave catch-up delivering nowhere. What refers to the queue (its grant, the job
table's catch-up deliveries, the stack output) reads the name from the queue itself.

Only a stack with a job that has a `catchup` policy deploys it; a two-region stack deploys one
in each region, with its own enqueuer grant (infra/resources/regions.py names the second), so
that the region still up catches up without the other. The runtime account may add
tasks to this queue only, and may put the invoker account's OIDC token on them (act as it),
which is what Cloud Tasks checks before it signs a task's request as that account.
"""

from __future__ import annotations

from typing import NamedTuple

import pulumi
import pulumi_gcp as gcp
import pulumiverse_time

from exactly_once.delivery.scheduler_request import parse_rfc3339
from infra.plan.catchup import catches_up, queue_path
from infra.resources.durations import duration
from infra.resources.regions import regional_prefix
from infra.settings.jobs import DEFAULT_RETRY
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.grants import CATCHUP_ACTS_AS_INVOKER, CATCHUP_ENQUEUER


class CatchupQueue(NamedTuple):
    # By region, the stack's first region first.
    queues: dict[str, gcp.cloudtasks.Queue]
    grants: list[pulumi.Resource]

    def paths(self, settings: StackSettings) -> dict[str, pulumi.Output[str]]:
        """Each region's queue by its full name (infra/plan/catchup.py's queue_path), read from
        the queue's own name."""
        return {region: _path(settings, queue, region) for region, queue in self.queues.items()}


def catchup_queue(
    name: str,
    settings: StackSettings,
    *,
    runtime_account: gcp.serviceaccount.Account,
    invoker_account: gcp.serviceaccount.Account,
    opts: pulumi.ResourceOptions,
) -> CatchupQueue | None:
    """The queue of each region and their grants; None when no job catches up. A catch-up
    delivery retries as a job's default Scheduler retries do (the timing rules hold for them):
    a crashed attempt's run is taken over once its lease has ended."""
    if not catches_up(settings):
        return None
    retry = DEFAULT_RETRY
    child = pulumi.ResourceOptions(parent=opts.parent)
    queues: dict[str, gcp.cloudtasks.Queue] = {}
    grants: list[pulumi.Resource] = []
    for region in settings.regions:
        prefix = regional_prefix(name, settings, region)
        # Created with the queue, replaced with it: a change of project or location is a new queue.
        created = pulumiverse_time.Static(
            f"{prefix}-catchup-queue-created",
            triggers={"project": settings.project, "location": region},
            opts=child,
        )
        queue = gcp.cloudtasks.Queue(
            f"{prefix}-catchup-queue",
            project=settings.project,
            location=region,
            name=created.rfc3339.apply(lambda time: settings.names.task_queue_id(_unix_seconds(time))),
            retry_config={
                "max_attempts": retry.retry_count + 1,
                "min_backoff": duration(retry.min_backoff_seconds),
                "max_backoff": duration(retry.max_backoff_seconds),
                "max_doublings": retry.max_doublings,
            },
            opts=opts,
        )
        queues[region] = queue
        enqueuer = gcp.cloudtasks.QueueIamMember(
            f"{prefix}-catchup-queue-enqueuer",
            project=settings.project,
            location=region,
            name=queue.name,
            role=CATCHUP_ENQUEUER.role,
            member=runtime_account.member,
            opts=child,
        )
        grants.append(enqueuer)
    # One account acting as another: a grant on the account, whatever region's queue signs.
    act_as = gcp.serviceaccount.IAMMember(
        f"{name}-runtime-acts-as-invoker",
        service_account_id=invoker_account.name,
        role=CATCHUP_ACTS_AS_INVOKER.role,
        member=runtime_account.member,
        opts=child,
    )
    return CatchupQueue(queues, [*grants, act_as])


def _path(settings: StackSettings, queue: gcp.cloudtasks.Queue, region: str) -> pulumi.Output[str]:
    return queue.name.apply(lambda queue_id: queue_path(settings, queue_id, region))


def _unix_seconds(rfc3339: str) -> int:
    """The creation time a `time.Static` recorded (its `rfc3339`; its `unix` holds the same)."""
    return int(parse_rfc3339(rfc3339).timestamp())
