"""How a stack's costs grow with its number of jobs: `python -m bench.scale 10 100 1000`.

Each stack is N ordinary jobs (hourly, each with a handler of its own, so that every one has
an entry in the job table) plus the missed-run audit. For each N it reports the job table's
bytes (shipped in the function's source, not in its environment), the environment's bytes
(what Cloud Run limits to 32 KiB), the time the settings' checks take, the time the function
takes to read and check the table at start-up, and the time the Pulumi program takes under
mocks (tools/mocked_program.py): the numbers docs/scale.md quotes. Times are the process's CPU
time (`time.process_time`, every thread's): on a shared machine the wall clock mostly measures
the other processes; they are still one machine's. The sizes are exact.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from exactly_once.config import JOB_TABLE_ENV, JOB_TABLE_FILE, FunctionConfig
from infra.plan.audit_job import audit_config, with_audit_job
from infra.settings.environment import environment_bytes, function_environment, function_secrets, job_table
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


def main(argv: list[str]) -> None:
    counts = [int(arg) for arg in argv] or [10, 100, 1000]
    print(
        "| jobs | job table | environment | settings' checks | table read at start-up | program under mocks |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for count in counts:
        costs = measure(count)
        program = "-" if costs.program_seconds is None else f"{costs.program_seconds:.1f} s"
        print(
            f"| {costs.jobs} | {costs.table_bytes:,} B | {costs.environment_bytes:,} B | "
            f"{costs.settings_seconds:.2f} s | {costs.parse_seconds * 1000:.1f} ms | {program} |",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
