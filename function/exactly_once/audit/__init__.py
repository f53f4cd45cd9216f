"""The missed-run audit: every fire time of a job's schedule, checked against the ledger.

`missed_runs` walks a schedule and finds the runs without a completed record; `config` reads
which jobs to audit; `reads` reads run records by id in batches.
"""
