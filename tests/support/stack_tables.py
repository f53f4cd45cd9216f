"""A stack's job table, with its audit, as the program ships it (for tests that serve it)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from exactly_once.audit.config import Redelivery
from infra.plan.audit_job import audit_config
from infra.settings.environment import job_table
from infra.settings.stack import StackSettings
from tests.support.job_tables import table_env


def audit_table_env(
    settings: StackSettings,
    deployed_at: Mapping[str, datetime] | None = None,
    redelivery: Redelivery | None = None,
    pause_changed_at: Mapping[str, datetime] | None = None,
) -> dict[str, str]:
    """JOB_TABLE naming the stack's table, its audit configured as `audit_config` says."""
    return table_env(job_table(settings, audit_config(settings, deployed_at, redelivery, pause_changed_at)))
