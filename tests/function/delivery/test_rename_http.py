"""A job renamed with its run key kept, while `pulumi up` runs: the function's table names the new
job before the old Scheduler job is deleted. The old job's deliveries must not run the renamed
job's runs by a fallback handler, nor record them: through a real Functions Framework server."""

from __future__ import annotations

from exactly_once.config import JobPolicy, JobTable
from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER
from tests.support.demo_runs import HEADERS, RUN_ID, deliver, executions, run_record
from tests.support.job_tables import table_env

RENAMED = {**HEADERS, JOB_NAME_HEADER: "nightly-renamed"}


def test_the_old_scheduler_job_of_a_renamed_job_is_refused_unclaimed_and_the_new_one_runs(start_server, db):
    # The fallback handler (JOB_HANDLER) is set: the old name must not reach it.
    table = JobTable(jobs={"nightly-renamed": JobPolicy(run_key="nightly")}, names_every_job=True)
    server = start_server(**table_env(table))
    old = deliver(server)
    assert (old.status_code, old.json()["outcome"]) == (404, "unknown_job")
    assert "nightly" in old.json()["message"]
    assert not run_record(db).exists
    assert executions(db) == []
    new = deliver(server, headers=RENAMED)
    assert (new.status_code, new.json()["outcome"]) == (200, "executed")
    assert new.json()["run_id"] == RUN_ID  # the run key kept the run's id
    assert len(executions(db)) == 1
