"""Case 7's audit again, in a process of its own confined to a CPU quota (bench/cpu_quota.py).

The audit runs in the function, on an instance that has a sixth of a vCPU by default, and its
attempt has the function's time limit (exactly_once.config.DEFAULT_TIME_LIMIT_SECONDS), of
which it spends JUDGING_SHARE reading and judging (exactly_once/audit/budget.py) before it
stops and leaves the rest of the hour to the next audit. Whether an hour of a large stack fits
is a question of CPU, which an unconfined audit on an idle core does not answer. So the hour
case 7 seeded (the audit only reads, so it can be audited twice) is audited again by a child
process confined to the quota: the child imports and builds the stack's settings first, says
it is ready, and only then is it moved into its cgroup and told to go, so the quota falls on
the audit alone, as on an instance that is already up when the audit's request arrives.

    python -m bench.confined_audit PROJECT JOBS SCHEDULE_TIME    # the child's side
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.cpu_quota import CpuQuotas
from exactly_once.audit.budget import JUDGING_SHARE
from exactly_once.config import DEFAULT_TIME_LIMIT_SECONDS

REPO = Path(__file__).resolve().parent.parent
READY, GO = "ready", "go"
# The child's longest audit: an hour of 1,000 jobs at a sixth of a vCPU takes minutes.
AUDIT_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class ConfinedAudit:
    """One audit of the seeded hour at a CPU quota, against the time an attempt has."""

    quota: str  # CpuQuotas.description
    runs: int  # judged
    missed: int
    seconds: float  # wall clock, in the confined child
    cpu_seconds: float  # the child's CPU during the audit
    time_limit_seconds: float = DEFAULT_TIME_LIMIT_SECONDS
    judging_seconds: float = DEFAULT_TIME_LIMIT_SECONDS * JUDGING_SHARE

    @property
    def share_judged_in_time(self) -> float:
        """Of the hour, what one audit at this pace judges before its budget stops it: the rest
        is the next audit's."""
        return min(1.0, self.judging_seconds / self.seconds) if self.seconds > 0 else 1.0


def audit_confined(
    quotas: CpuQuotas, project: str, jobs: int, schedule_time: str, runs: int, missed: int
) -> ConfinedAudit:
    """Audit the hour of `jobs` seeded on `project` (the audit run at `schedule_time`) in a
    child confined to `quotas`; refuses a result that judged or missed other than the
    unconfined audit's `runs` and `missed`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.confined_audit", project, str(jobs), schedule_time],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        if (said := child.stdout.readline().strip()) != READY:
            raise RuntimeError(f"the confined audit's process did not start (said {said!r})")
        quotas.confine(child.pid)
        child.stdin.write(GO + "\n")
        child.stdin.flush()
        out, _ = child.communicate(timeout=AUDIT_TIMEOUT_SECONDS)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"the confined audit exited {child.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    if (result["judged"], result["missed"]) != (runs, missed):
        raise RuntimeError(
            f"the confined audit judged {result['judged']} runs and missed {result['missed']}, "
            f"not the {runs} and {missed} of the same hour unconfined"
        )
    return ConfinedAudit(quotas.description, runs, missed, result["seconds"], result["cpu_seconds"])


def main(argv: list[str]) -> None:
    """The child: get ready, wait to be confined, audit, print the result as one JSON line."""
    from exactly_once.delivery.scheduler_request import parse_rfc3339
    from tests.support.audit_scale import audit_seeded_hour, minutely_settings

    project, jobs, schedule_time = argv
    settings = minutely_settings(int(jobs))
    print(READY, flush=True)
    if sys.stdin.readline().strip() != GO:
        raise SystemExit("bench.confined_audit: not told to go")
    outcome, _, seconds, cpu_seconds = audit_seeded_hour(project, settings, parse_rfc3339(schedule_time))
    print(
        json.dumps(
            {
                "judged": outcome.output["judged"],
                "missed": len(outcome.missed()),
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
