"""The timing of each Scheduler job against its function: the rules that keep a run from being
lost or doubled when attempts overrun, retry or outlive their records.

`pairing` finds the function a job calls; `reading` reads the pair's deadline, retries,
timeout, lease, time limit and retention into rules/timing/rules.py's `JobTiming`;
`invariants` runs those rules and words each violation as the properties to change;
`catchup` holds each job's catch-up window (the job table's `audit`) to rules/timing/catchup.py.
What one job must say on its own (schedule, deadline range) is scheduler_jobs.py's.
"""
