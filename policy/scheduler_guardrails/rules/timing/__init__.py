"""The timing rules: Cloud Scheduler's retry schedule, unix-cron, and the invariants between a
job's schedule, deadline, retries, the lease and the retention that make deduplication safe.

Pure standard library: the settings, the policy pack and the local scheduler all apply these,
so a simulator cannot retry differently from the checks that approved a config.
"""
