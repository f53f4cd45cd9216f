"""The catch-up window's timing rule (policy/scheduler_guardrails/rules/timing/catchup.py)
phrased with the config keys a user edits, with the numbers the stack schedules its missed-run
audit by."""

from __future__ import annotations

from infra.settings.jobs import DEFAULT_RETRY
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.timing import audit_cadence as cadence
from policy.scheduler_guardrails.rules.timing.catchup import CatchupTiming, check_catchup_window

_KEYS = {"window_seconds": "jobs[{index}].catchup.windowSeconds", "retention_seconds": "retentionSeconds"}


def catchup_errors(settings: StackSettings) -> list[str]:
    """Every job whose catch-up window the stack's audit cannot serve, naming the keys."""
    errors: list[str] = []
    interval = 3600.0 * cadence.audit_interval_hours(
        settings.lease_seconds, DEFAULT_RETRY.min_backoff_seconds
    )
    for index, job in enumerate(settings.jobs):
        if job.catchup is None:
            continue
        window_key = settings.config_key(_KEYS["window_seconds"].format(index=index))
        if not settings.missed_run_audit:
            errors.append(
                f"{window_key}: job {job.name!r}: the stack's missed-run audit delivers missed runs again, "
                f"and {settings.config_key('missedRunAudit')} is false; set it true or remove the catchup key"
            )
            continue
        timing = CatchupTiming(
            window_seconds=job.catchup.window_seconds,
            schedule=job.schedule,
            time_zone=job.time_zone,
            retry_window_seconds=cadence.retry_window(
                job.retry, job.attempt_deadline_seconds, settings.lease_seconds
            ),
            audit_interval_seconds=interval,
            retention_seconds=settings.retention_seconds,
        )
        for violation in check_catchup_window(timing):
            keys = [settings.config_key(_KEYS[f].format(index=index)) for f in violation.fields if f in _KEYS]
            errors.append(f"{', '.join(keys)}: job {job.name!r}: {violation.message}")
    return errors
