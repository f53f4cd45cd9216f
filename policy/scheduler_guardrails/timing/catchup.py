"""catchup-window: every catch-up window the deployed audit is configured with can be served.

The audit's configuration is the `audit` of the job table the function ships in its source
(exactly_once.audit.config, read by engine/job_table.py): each job's catch-up window and
retry window, the audit's interval. The ledger's retention is
the function's RETENTION_SECONDS. The rule is rules/timing/catchup.py's, the one the stack
validates its config with; here it is read from what is about to be deployed, so a hand-edited
table or a fork's own program is held to it too.
"""

from __future__ import annotations

from pulumi_policy import ReportViolation, StackValidationArgs

from exactly_once.audit.config import AUDIT_TABLE_KEY, AuditConfig, AuditError
from exactly_once.config import RETENTION_SECONDS_ENV

from ..engine.env import function_env
from ..engine.functions import ledger_functions
from ..engine.job_table import job_table_of
from ..engine.props import MISSING, UNKNOWN, Absent, as_number
from ..rules.timing.catchup import CatchupTiming, check_catchup_window

_FIX = {
    "catchup-window-reachable": "lengthen the job's catchup.windowSeconds to at least the number named",
    "catchup-window-within-retention": (
        f"shorten the job's catchup.windowSeconds, or raise {RETENTION_SECONDS_ENV} (retentionSeconds)"
    ),
    "catchup-window-runs": (
        "shorten the job's catchup.windowSeconds to at most the window named, or schedule the job less often"
    ),
}


def validate_catchup_windows(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    resources = list(args.resources)
    for function in ledger_functions(resources):
        table = job_table_of(function, resources)
        retention_raw = function_env(function, RETENTION_SECONDS_ENV)
        if isinstance(table, str):
            report_violation(f"{table}.", function.urn)
            continue
        if isinstance(table, Absent) or table.audit is None or retention_raw is UNKNOWN:
            continue  # no audit here, or an input unknown in preview: checked on the update
        where = f"function '{function.name}' job table's {AUDIT_TABLE_KEY}"
        try:
            config = AuditConfig.from_raw(table.audit)
        except AuditError as error:
            report_violation(f"{where}: {error}.", function.urn)
            continue
        retention = None if retention_raw is MISSING else as_number(retention_raw)
        for job in config.jobs:
            if job.catchup is None:
                continue
            if retention is None:
                report_violation(
                    f"{where}: job {job.name} catches up, but {RETENTION_SECONDS_ENV} is not a number of "
                    "seconds: set it explicitly so its window can be checked.",
                    function.urn,
                )
                continue
            timing = CatchupTiming(
                window_seconds=job.catchup.window_seconds,
                schedule=job.schedule,
                time_zone=job.time_zone,
                retry_window_seconds=job.retry_window_seconds,
                audit_interval_seconds=config.interval_seconds,
                retention_seconds=retention,
            )
            for violation in check_catchup_window(timing):
                report_violation(
                    f"{where}: job {job.name} [{violation.rule}]: {violation.message}. "
                    f"Fix: {_FIX[violation.rule]}.",
                    function.urn,
                )
