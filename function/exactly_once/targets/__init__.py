"""What the shipped proxy jobs (function/jobs/) share: how a downstream failure is classified
(`errors`), how long a call may take (`call_timeout`), what a Cloud Run job or BigQuery proxy
starts per scheduled job (`job_specs`), and the resource names the APIs take
(`resource_names`). The stack's config validation checks a job's settings with `job_specs`
and `resource_names`, and its timing advisory reads `call_timeout`.

An extension of the core, which never imports it: what a proxy run started is reported on
RunContext.downstream and followed through the follower each proxy job registers
(delivery/following.py), so a fork without proxy jobs deletes them and this package.
"""
