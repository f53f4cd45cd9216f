"""The sample jobs a stack runs with `samples: true`: one of each thing the template shows off.

A demo job every 15 minutes (the demo handler, a one-second body), then the sample job of each
target kind present that has one (`sample_job`, policy/scheduler_guardrails/rules/targets/): with the
template's kinds, a
job through the Workflows proxy to the sample workflow the stack deploys (which checks the
run's idempotency token before its state-changing step), and a job through the BigQuery proxy
appending one row per run to a table of the stack's sample dataset. A fork that deleted the
kinds gets the demo job alone. They are jobs like any other, validated and deployed the same
way, appended after the stack's own: a stack without `samples` (a forker's production) deploys
its own jobs only, and no sample workflow, token check or dataset.

A sample Cloud Run job is left out: its token check must accept callers from outside any VPC
network, which the stack's internal-only token check does not (docs/proxy.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS

# function/jobs/demo.py: records each run, and sleeps or fails as its body asks.
DEMO_HANDLER: Final = "jobs.demo:run_demo_job"
DEMO_JOB: Final = "demo-every-15-minutes"
# Instant failures retry at 15, 45, 105, 225, 465 s: the 45 s one and every later one come after
# the 30 s lease a crashed attempt leaves behind, and all of them before the next run.
_RETRY: Final[Mapping[str, Any]] = {
    "retryCount": 5,
    "minBackoffSeconds": 15,
    "maxBackoffSeconds": 300,
    "maxDoublings": 3,
    "maxRetryDurationSeconds": 0,
}


def _job(name: str, schedule: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": schedule,
        "timeZone": "Etc/UTC",
        "attemptDeadlineSeconds": 60,
        "retry": dict(_RETRY),
        **fields,
    }


SAMPLE_JOBS: Final[tuple[Mapping[str, Any], ...]] = (
    # The demo job by name: a stack's own jobHandler may be anything, or nothing.
    _job(DEMO_JOB, "*/15 * * * *", handler=DEMO_HANDLER, body={"sleep_seconds": 1}),
    *(
        _job(kind.sample_job.name, kind.sample_job.schedule, **{kind.key: dict(kind.sample_job.setting)})
        for kind in TARGET_KINDS
        if kind.sample_job is not None
    ),
)
SAMPLE_JOB_NAMES: Final = frozenset(str(job["name"]) for job in SAMPLE_JOBS)


def with_samples(raw_jobs: Any) -> Any:
    """The stack's own jobs, then the samples: its jobs keep their `jobs[i]` keys in errors.
    A `jobs` value that is not a list is left for the parser to refuse."""
    if raw_jobs is not None and not isinstance(raw_jobs, list):
        return raw_jobs
    return [*(raw_jobs or []), *(dict(job) for job in SAMPLE_JOBS)]
