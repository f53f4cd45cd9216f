"""How a stack's costs grow with its number of jobs: `python -m bench.scale 10 100 1000`.

Each stack is N ordinary jobs (hourly, each with a handler of its own, so that every one has
an entry in the job table) plus the missed-run audit. For each N it reports the job table's
bytes (shipped in the function's source, not in its environment), the environment's bytes
(what Cloud Run limits to 32 KiB), the time the settings' checks take, the time the function
takes to read and check the table at start-up, and the time the Pulumi program takes under
mocks (tools/mocked_program.py): the numbers docs/scale.md quotes. Times are the process's CPU
time (`time.process_time`, every thread's): on a shared machine the wall clock mostly measures
the other processes; they are still one machine's. The sizes are exact.

`make bench` case 7 (`python -m bench.run --cases 7`) runs these and, on the emulator, the
hourly missed-run audit of an hour of 1,000 jobs that each run every minute (60,000 runs, 37
of them left undelivered): its wall-clock and CPU time (in all and per audited run) and the
Firestore pages and documents it reads; then, where a CPU quota can be set up, the same audit
in a process confined to a sixth of a vCPU, the default instance's, against the time limit of
its attempt (bench/confined_audit.py). The seeding and the audit are
tests/support/audit_scale.py's, which tests/ops/test_audit_scale.py proves correct at 100 jobs.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.confined_audit import ConfinedAudit, audit_confined
from bench.cpu_quota import CpuQuotas, Unavailable
from exactly_once.config import JOB_TABLE_ENV, JOB_TABLE_FILE, FunctionConfig
from infra.plan.audit_job import audit_config, with_audit_job
from infra.settings.environment import function_environment, function_secrets, job_table
from policy.scheduler_guardrails.rules.environment_size import environment_bytes
from tools.scale_stack import scale_settings


@dataclass(frozen=True)
class ScaleCosts:
    jobs: int
    table_bytes: int
    environment_bytes: int
    settings_seconds: float
    parse_seconds: float
    program_seconds: float | None


def measure(jobs: int, *, program: bool = True) -> ScaleCosts:
    started = time.process_time()
    settings = scale_settings(jobs)
    settings_seconds = time.process_time() - started
    audited = with_audit_job(settings)
    table = job_table(audited, audit_config(audited)).to_json()
    env = function_environment(audited)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / JOB_TABLE_FILE
        path.write_text(table, encoding="utf-8")
        parse = []
        for _ in range(5):
            started = time.process_time()
            config = FunctionConfig.from_env({**env, JOB_TABLE_ENV: str(path)})
            parse.append(time.process_time() - started)
        assert len(config.jobs) == jobs + 1
    program_seconds = None
    if program:
        from tools.mocked_program import mock_stack

        started = time.process_time()
        mock_stack(settings)
        program_seconds = time.process_time() - started
    return ScaleCosts(
        jobs=jobs,
        table_bytes=len(table.encode()),
        environment_bytes=environment_bytes(env, function_secrets(audited)),
        settings_seconds=settings_seconds,
        parse_seconds=sorted(parse)[len(parse) // 2],
        program_seconds=program_seconds,
    )


# Case 7: the stacks whose table, checks and program it measures, and the audited hour's.
CASE_JOBS = (10, 100, 1000)
AUDIT_JOBS = 1000
AUDIT_MISSING = 37


@dataclass(frozen=True)
class AuditCosts:
    """One audit of an hour of `jobs` every-minute jobs on the emulator."""

    jobs: int
    runs: int  # judged
    missed: int  # reported, each one of the runs left out
    pages: int  # batched gets
    documents: int  # records asked for (each a billed read)
    seconds: float  # wall clock
    cpu_seconds: float  # this process's CPU time
    seed_seconds: float  # writing the hour's records, before the audit
    schedule_time: str  # the audit run's (RFC 3339): the same hour can be audited again

    @property
    def cpu_us_per_run(self) -> float:
        """CPU per audited run, in microseconds."""
        return self.cpu_seconds * 1e6 / self.runs


def measure_audit(project: str, jobs: int = AUDIT_JOBS, missing: int = AUDIT_MISSING) -> AuditCosts:
    """The audit of an hour of `jobs` on the emulator's `project` (FIRESTORE_EMULATOR_HOST);
    refuses to report one that did not find exactly the runs left out. The seeding is the scale
    test's, imported here only, so `python -m bench.scale` runs without the tests' modules."""
    from exactly_once.delivery.scheduler_request import format_rfc3339
    from tests.support.audit_scale import audit_an_hour

    hour = audit_an_hour(project, jobs, missing)
    expected = {(job, format_rfc3339(instant)) for job, instant in hour.missing}
    if hour.outcome.missed() != expected or hour.outcome.output["judged"] != len(hour.runs):
        raise RuntimeError(
            f"the audit of {jobs} jobs judged {hour.outcome.output['judged']} of {len(hour.runs)} runs and "
            f"reported {len(hour.outcome.missed())} missed, not the {len(expected)} left out"
        )
    return AuditCosts(
        jobs=jobs,
        runs=len(hour.runs),
        missed=len(expected),
        pages=hour.reads.pages,
        documents=hour.reads.documents,
        seconds=hour.seconds,
        cpu_seconds=hour.cpu_seconds,
        seed_seconds=hour.seed_seconds,
        schedule_time=format_rfc3339(hour.outcome.schedule_time),
    )


@dataclass
class ScaleCase:
    """Case 7's results, as the report writes them."""

    stacks: list[ScaleCosts]
    audit: AuditCosts
    # The same audit at a CPU quota, or why there is none (None: not asked for).
    confined: ConfinedAudit | Unavailable | None = None

    def as_json(self) -> dict[str, Any]:
        audit = {**asdict(self.audit), "cpu_us_per_run": self.audit.cpu_us_per_run}
        confined: dict[str, Any] | None = None
        if isinstance(self.confined, ConfinedAudit):
            confined = {
                **asdict(self.confined),
                "cpu_us_per_run": self.confined.cpu_seconds * 1e6 / self.confined.runs,
                "share_judged_in_time": self.confined.share_judged_in_time,
            }
        elif isinstance(self.confined, Unavailable):
            confined = {"unavailable": self.confined.reason}
        return {
            "stacks": [asdict(costs) for costs in self.stacks],
            "audit": audit,
            "audit_at_quota": confined,
        }

    def markdown(self) -> list[str]:
        audit = self.audit
        return [
            "### Case 7: a stack of many jobs (`bench/scale.py`)",
            "",
            *stack_table(self.stacks),
            "",
            f"The hourly audit of an hour of {audit.jobs:,} jobs that each run every minute, on the "
            f"emulator: {audit.runs:,} runs judged, {audit.missed} missed (exactly those left out).",
            "",
            "| Audit | wall clock | CPU (this process) | CPU per audited run | Firestore batched gets "
            "| documents read |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
            f"| {audit.jobs:,} jobs x 60 runs | {audit.seconds:.1f} s | {audit.cpu_seconds:.1f} s | "
            f"{audit.cpu_us_per_run:.0f} µs | {audit.pages:,} | {audit.documents:,} |",
            *self._confined_row(),
            "",
            f"(Seeding the hour's records beforehand, {audit.runs - audit.missed:,} writes in batches "
            f"of 500, took {audit.seed_seconds:.0f} s and is not part of the audit's time.)",
            "",
            *self._confined_note(),
        ]

    def cpu_row(self) -> str:
        """The audit's row in the report's CPU table (bench/report.py): CPU per audited run
        and the whole audit's wall time, unconfined and at the quota; the documented flow has
        no audit."""
        audit, confined = self.audit, self.confined
        at_quota = (
            f"{confined.cpu_seconds * 1e6 / confined.runs:.0f} µs | {confined.seconds:.1f} s"
            if isinstance(confined, ConfinedAudit)
            else "- | -"
        )
        return (
            f"| audited run (case 7, {audit.runs:,} runs: CPU per run, wall for them all) "
            f"| {audit.cpu_us_per_run:.0f} µs | {audit.seconds:.1f} s | - | - | {at_quota} | - | - |"
        )

    def _confined_row(self) -> list[str]:
        confined = self.confined
        if not isinstance(confined, ConfinedAudit):
            return []
        return [
            f"| the same, at a CPU quota | {confined.seconds:.1f} s | {confined.cpu_seconds:.1f} s | "
            f"{confined.cpu_seconds * 1e6 / confined.runs:.0f} µs | | |"
        ]

    def _confined_note(self) -> list[str]:
        confined = self.confined
        if isinstance(confined, Unavailable):
            return [f"The audit at a CPU quota was not run: {confined.reason}.", ""]
        if confined is None:
            return []
        verdict = (
            "fits"
            if confined.share_judged_in_time >= 1.0
            else f"does not fit: one audit judges about {confined.share_judged_in_time:.0%} of the hour "
            "before its budget stops it, and the next audits continue from there"
        )
        return [
            f"At the quota, {confined.quota}, the audit (in a process of its own, `bench/confined_audit.py`) "
            f"took {confined.seconds:.1f} s against the {confined.time_limit_seconds:g} s time limit of the "
            f"default function's attempt, of which the audit reads and judges for "
            f"{confined.judging_seconds:g} s (`exactly_once/audit/budget.py`): the hour {verdict}.",
            "",
        ]


def scale_case(
    project: str,
    counts: tuple[int, ...] = CASE_JOBS,
    audit_jobs: int = AUDIT_JOBS,
    *,
    program: bool = True,
    quotas: CpuQuotas | Unavailable | None = None,
) -> ScaleCase:
    """Case 7: the stack's costs at each of `counts`, the audit of `audit_jobs`, and the same
    audit confined to `quotas` (or the reason there are none)."""
    stacks = [measure(count, program=program) for count in counts]
    audit = measure_audit(project, audit_jobs)
    confined: ConfinedAudit | Unavailable | None = quotas if isinstance(quotas, Unavailable) else None
    if isinstance(quotas, CpuQuotas):
        confined = audit_confined(quotas, project, audit.jobs, audit.schedule_time, audit.runs, audit.missed)
    return ScaleCase(stacks, audit, confined)


def stack_table(rows: list[ScaleCosts]) -> list[str]:
    lines = [
        "| jobs | job table | environment | settings' checks | table read at start-up "
        "| program under mocks |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for costs in rows:
        program = "-" if costs.program_seconds is None else f"{costs.program_seconds:.1f} s"
        lines.append(
            f"| {costs.jobs} | {costs.table_bytes:,} B | {costs.environment_bytes:,} B | "
            f"{costs.settings_seconds:.2f} s | {costs.parse_seconds * 1000:.1f} ms | {program} |"
        )
    return lines


def main(argv: list[str]) -> None:
    counts = [int(arg) for arg in argv] or list(CASE_JOBS)
    header, rule = stack_table([])
    print(header, rule, sep="\n")
    for count in counts:
        print(stack_table([measure(count)])[-1], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
