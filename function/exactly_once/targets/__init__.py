"""What the shipped proxy jobs (function/jobs/) share: how a downstream failure is classified
(`errors`), how long a call may take (`call_timeout`), how a kind's per-job table travels in the
function's environment (`job_tables`), and the resource names the APIs take (`resource_names`).
Beside them, what the Cloud Run job and BigQuery proxies start per scheduled job
(`cloud_run_job_spec`, `bigquery_job_spec`), which go with their kinds when a fork deletes
them. The stack's config validation checks a job's settings with the specs and
`resource_names`, and its timing advisory reads `call_timeout`.

An extension of the core, which never imports it: what a proxy run started is reported on
RunContext.downstream and followed through the follower each proxy job registers
(delivery/following.py), so a fork without proxy jobs deletes them and this package.
"""
