"""The resource names the proxies' APIs take, and those the stack grants the runtime account
access to.

Their own module, free of any client library, so the stack's config validation checks a job's
settings against the very patterns the jobs check them with.
"""

from __future__ import annotations

import re

WORKFLOW_RESOURCE_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/workflows/[^/]+$")
CLOUD_RUN_JOB_RESOURCE_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/jobs/[a-z][a-z0-9-]{0,62}$")
# A Cloud Run job's own name, as the config may give it (in the stack's project and region).
CLOUD_RUN_JOB_ID = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
# BigQuery: project ids (including domain-scoped `example.com:p`), dataset and table ids.
_BQ_PROJECT = r"[a-z][a-z0-9.:-]{4,62}[a-z0-9]"
BIGQUERY_DATASET = re.compile(rf"^(?P<project>{_BQ_PROJECT})\.(?P<dataset>[A-Za-z0-9_]{{1,1024}})$")
BIGQUERY_TABLE = re.compile(
    rf"^(?P<project>{_BQ_PROJECT})\.(?P<dataset>[A-Za-z0-9_]{{1,1024}})\.(?P<table>[\w$-]{{1,1024}})$"
)
