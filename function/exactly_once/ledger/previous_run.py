"""What RunContext.previous() answers: the job's last successful run, as its job status holds it.

Here, in the ledger, because the job status (job_status.py) is what builds it; the job reads
it through its RunContext, one room up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class PreviousRun:
    """The job's last successful run, as its job status recorded it (ledger/job_status.py)."""

    schedule_time: datetime
    # What that run returned (decoded JSON; None when it returned nothing).
    output: Any
    run_id: str
    forced: bool = False
