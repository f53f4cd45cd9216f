"""What the shipped proxy jobs (function/jobs/) share: how a downstream failure is classified
(`errors`), how long a call may take (`call_timeout`), where each API client connects and
which endpoints may be reached without credentials (`endpoints`, `loopback`), what a Cloud Run
job or BigQuery proxy starts per scheduled job (`job_specs`), the resource names the APIs take
(`resource_names`), and what a proxy run started downstream, on the run's record
(`downstream`), followed to its end through each proxy's client (`following`). The stack's
config validation checks a job's settings with `job_specs` and `resource_names`, and its
timing advisory reads `call_timeout`.
"""
