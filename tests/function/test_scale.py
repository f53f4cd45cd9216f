"""A function started with a thousand jobs' table: read once at start-up, every handler
resolved, and a run of any of them served (in process, on the emulator)."""

from __future__ import annotations

import dataclasses

from exactly_once.config import FunctionConfig, OverlapPolicy
from exactly_once.router import JobRouter
from tests.function import sample_jobs
from tests.support.handler_harness import HEADERS, Harness
from tests.support.job_tables import jobs_env

JOBS = [f"eos-prod_job-{index:04d}" for index in range(1000)]


def test_a_thousand_job_table_is_read_and_any_of_its_jobs_is_served(db):
    handlers = {job: "tests.function.sample_jobs:record_call" for job in JOBS}
    limits = {job: 30.0 for job in JOBS[::2]}
    config = FunctionConfig.from_env(jobs_env(handlers, time_limits=limits, overlap={JOBS[1]: "skip"}))
    assert len(config.jobs) == 1000 and config.job_handler is None
    assert (config.time_limit_for(JOBS[998]), config.time_limit_for(JOBS[999])) == (30.0, 55.0)
    # The table's policies but their overlap, which needs the locks this harness has none of.
    alone = {
        job: dataclasses.replace(policy, overlap=OverlapPolicy.ALLOW) for job, policy in config.jobs.items()
    }
    harness = Harness(db, "jobs.noop:do_nothing", jobs=alone)
    # What main.py serves: the router over the table's handlers, with no default.
    harness.handler._job = JobRouter(config.job_handler, config.job_handlers).run

    reply = harness.deliver(headers={**HEADERS, "x-cloudscheduler-jobname": JOBS[-1]})
    assert (reply.status, reply.body["outcome"]) == (200, "executed")
    assert [context.job_name for context in sample_jobs.CALLS] == [JOBS[-1]]
    # A job the table does not name (and no JOB_HANDLER): refused, naming it, never run.
    unknown = harness.deliver(headers={**HEADERS, "x-cloudscheduler-jobname": "eos-prod_job-1000"})
    assert (unknown.status, unknown.body["outcome"]) == (200, "failed_terminal")
    assert "no handler for job 'eos-prod_job-1000'" in harness.log_lines()[-1]["error"]
    assert len(sample_jobs.CALLS) == 1
