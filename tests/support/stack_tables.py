"""A stack's job table, with its audit, as the program ships it: for tests that serve it, and
the table a mocked program put in its function's source."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime

import pulumi

from exactly_once.audit.config import Redelivery
from exactly_once.config import JOB_TABLE_FILE, JobTable
from infra.plan.audit_job import audit_config
from infra.settings.environment import function_environment, job_table
from infra.settings.stack import StackSettings
from tests.support.job_tables import table_env
from tools.mocked_program import MockedResource

FUNCTION_TYPE = "gcp:cloudfunctionsv2/function:Function"
BUCKET_OBJECT_TYPE = "gcp:storage/bucketObject:BucketObject"


def audit_table_env(
    settings: StackSettings,
    deployed_at: Mapping[str, datetime] | None = None,
    redelivery: Redelivery | tuple[Redelivery, ...] | None = None,
    pause_changed_at: Mapping[str, datetime] | None = None,
) -> dict[str, str]:
    """JOB_TABLE naming the stack's table, its audit configured as `audit_config` says."""
    return table_env(job_table(settings, audit_config(settings, deployed_at, redelivery, pause_changed_at)))


def shipped_table(resources: Iterable[MockedResource], function: str = "function") -> JobTable:
    """The job table the mocked program ships in the source of its function named `*-{function}`:
    the StringAsset JOB_TABLE_FILE of the BucketObject its build reads."""
    built = next(r for r in resources if r.type == FUNCTION_TYPE and r.name.endswith(f"-{function}"))
    storage = built.inputs["buildConfig"]["source"]["storageSource"]
    (source,) = [
        r
        for r in resources
        if r.type == BUCKET_OBJECT_TYPE
        and (r.inputs["bucket"], r.inputs["name"]) == (storage["bucket"], storage["object"])
    ]
    archive = source.inputs["source"]
    assert isinstance(archive, pulumi.AssetArchive)
    asset = archive.assets[JOB_TABLE_FILE]
    assert isinstance(asset, pulumi.StringAsset)
    return JobTable.from_json(asset.text, JOB_TABLE_FILE, ceiling=math.inf)


def stack_function_env(settings: StackSettings) -> dict[str, str]:
    """The function's environment as the stack sets it, JOB_TABLE naming the table it ships."""
    return {**function_environment(settings), **table_env(job_table(settings))}


def table_handlers(table: JobTable) -> dict[str, str]:
    """Each job's own handler in `table`, by deployed job id."""
    return {job: policy.handler for job, policy in table.jobs.items() if policy.handler is not None}
