"""Reading the job table a function ships in its source: each job's handler, time limit,
starting deadline and overlap, and the missed-run audit's configuration.

The stack writes the table into the function's source archive (exactly_once.config's
JOB_TABLE_FILE, named by the function's JOB_TABLE variable) rather than into its environment,
which Cloud Run limits to 32 KiB. The engine hands a policy that archive as the `source` of
the Cloud Storage object the function's build reads (`buildConfig.source.storageSource`), a
`pulumi.AssetArchive` whose members are assets; the table is a `pulumi.StringAsset`, so its
text is right there. The one reader of it is here: the per-job checks ask `job_table_of`, and
`job_policy` for one job's entry.

Whatever the pack cannot read is UNKNOWN, like a preview-time unknown, so a check skips it
rather than guess: the archive or the object's name before the first update (the table holds
times and accounts the update creates), a table shipped as a file asset, or one the source
object of another stack holds. A table that is there but malformed is a problem text: the
function would refuse to start with it.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Iterable

import pulumi
from pulumi_policy import PolicyResource

from exactly_once.config import JOB_TABLE_ENV, JobPolicy, JobTable, JobTableError

from .env import function_env
from .props import MISSING, UNKNOWN, Absent, lookup
from .types import BUCKET_OBJECT, resources_of


def job_table_of(function: PolicyResource, resources: Iterable[PolicyResource]) -> JobTable | Absent | str:
    """The table `function` reads: MISSING when it names none (no JOB_TABLE: every job runs
    JOB_HANDLER with the function's limits), UNKNOWN when it cannot be read, or a problem text."""
    path = function_env(function, JOB_TABLE_ENV)
    if path is MISSING or (isinstance(path, str) and not path.strip()):
        return MISSING
    if not isinstance(path, str):
        return UNKNOWN
    member = posixpath.normpath(path.strip())
    if posixpath.isabs(member) or member.startswith(".."):
        return UNKNOWN  # a file outside the source: not in the archive
    text = _member_text(function, resources, member)
    if text is MISSING:
        return (
            f"function '{function.name}' {JOB_TABLE_ENV}={path!r}, but its source archive holds no "
            f"{member}: the function would refuse to start"
        )
    if isinstance(text, Absent):
        return text
    try:
        # The ceiling (JOB_TIME_LIMIT_SECONDS) is judged by the timing rules, with the timeout.
        return JobTable.from_json(text, f"{member} in function '{function.name}''s source", math.inf)
    except JobTableError as error:
        return str(error)


def job_policy(table: JobTable | Absent | str, job_name: object) -> JobPolicy | Absent | str:
    """One job's entry: MISSING when the table does not name it (it takes the defaults)."""
    if isinstance(table, str):
        return table
    if table is UNKNOWN or job_name is UNKNOWN:
        return UNKNOWN
    if table is MISSING or not isinstance(job_name, str):
        return MISSING
    return table.jobs.get(job_name, MISSING)


def _member_text(function: PolicyResource, resources: Iterable[PolicyResource], member: str) -> str | Absent:
    """The text of `member` in the archive of the object the function is built from; MISSING
    when the archive is known and does not hold it."""
    storage = lookup(function.props, "buildConfig", "source", "storageSource")
    bucket, name = lookup(storage, "bucket"), lookup(storage, "object")
    if not isinstance(bucket, str) or not isinstance(name, str):
        return UNKNOWN
    candidates = resources_of(resources, BUCKET_OBJECT)
    found = [o for o in candidates if lookup(o.props, "bucket") == bucket and lookup(o.props, "name") == name]
    if len(found) != 1:
        return UNKNOWN  # another stack's object, or several: not this stack's to read
    archive = lookup(found[0].props, "source")
    if not isinstance(archive, pulumi.AssetArchive):
        return UNKNOWN
    asset = archive.assets.get(member)
    if asset is None:
        return MISSING
    if not isinstance(asset, pulumi.StringAsset) or not isinstance(asset.text, str):
        return UNKNOWN
    return asset.text
