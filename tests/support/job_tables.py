"""The job table given to a served function as a stack gives it: a file JOB_TABLE names.

No infra imports: the function's own tests (Python 3.12, no Pulumi) use it too.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exactly_once.audit.config import AuditConfig
from exactly_once.config import JOB_TABLE_ENV, JOB_TABLE_FILE, JobPolicy, JobTable, OverlapPolicy


def table_env(table: JobTable) -> dict[str, str]:
    """JOB_TABLE naming a fresh file that holds `table`."""
    path = Path(tempfile.mkdtemp(prefix="eos-test-table-")) / JOB_TABLE_FILE
    path.write_text(table.to_json(), encoding="utf-8")
    return {JOB_TABLE_ENV: str(path)}


def jobs_env(
    handlers: Mapping[str, str] | None = None,
    *,
    overlap: Mapping[str, str] | None = None,
    time_limits: Mapping[str, float] | None = None,
    starting_deadlines: Mapping[str, float] | None = None,
    pause_after_failures: Mapping[str, int] | None = None,
    audit: AuditConfig | None = None,
) -> dict[str, str]:
    """JOB_TABLE for per-job maps as a test states them (by job name)."""
    handlers, overlap = handlers or {}, overlap or {}
    time_limits, starting_deadlines = time_limits or {}, starting_deadlines or {}
    pauses = pause_after_failures or {}
    names = {*handlers, *overlap, *time_limits, *starting_deadlines, *pauses}
    jobs = {
        name: JobPolicy(
            handler=handlers.get(name),
            time_limit_seconds=time_limits.get(name),
            starting_deadline_seconds=starting_deadlines.get(name),
            overlap=OverlapPolicy(overlap.get(name, OverlapPolicy.ALLOW)),
            pause_after_failures=pauses.get(name),
        )
        for name in names
    }
    raw_audit: dict[str, Any] | None = None if audit is None else json.loads(audit.to_json())
    return table_env(JobTable(jobs=jobs, audit=raw_audit))
