"""The hourly audit of a large stack on the emulator: an hour of jobs that each run every minute,
every run completed but a scattered few, judged as the audit job judges it. It must report
exactly the runs that were left out, and read each expected run's record once, in the pages
the code promises.

`make test` runs it at 100 jobs (6,000 runs: seeding them is most of its time); `make bench`
case 7 runs the same seeding and audit at 1,000 jobs (60,000 runs) and reports its time.
"""

from __future__ import annotations

import math
from collections import Counter

from exactly_once import log_fields
from exactly_once.audit.reads import PAGE_SIZE
from exactly_once.delivery.scheduler_request import format_rfc3339
from tests.support.audit_scale import BATCH_WRITES, audit_an_hour

JOBS = 100
MISSING = 37


def test_an_hour_of_every_minute_jobs_reports_exactly_the_runs_left_out(project) -> None:
    hour = audit_an_hour(project, JOBS, MISSING)
    runs, missing = hour.runs, hour.missing
    per_job = Counter(job for job, _ in runs)
    # Every ordinary job's 60 runs, and the audit's own run of the hour before.
    assert len(per_job) == JOBS + 1 and len(runs) == JOBS * 60 + 1
    assert sorted(set(per_job.values())) == [1, 60]
    # Scattered over jobs and minutes, the hour's first and last minutes among them.
    assert len(missing) == MISSING
    assert len({job for job, _ in missing}) > MISSING // 2 and len({time for _, time in missing}) > 10
    assert {min(time for _, time in runs), max(time for _, time in runs)} <= {time for _, time in missing}
    assert hour.commits == math.ceil((len(runs) - MISSING) / BATCH_WRITES)

    outcome = hour.outcome
    assert outcome.missed() == {(job, format_rfc3339(time)) for job, time in missing}
    assert (outcome.output["judged"], outcome.output["missed"]) == (len(runs), MISSING)
    (summary,) = outcome.events(log_fields.AUDIT_SUMMARY)
    assert (summary["judged"], summary["missed"]) == (len(runs), MISSING)
    # One page for the audit's own record (the stack's target), then each job's runs in pages
    # of PAGE_SIZE: every expected run's record asked for exactly once.
    assert hour.reads.pages == 1 + sum(math.ceil(n / PAGE_SIZE) for n in per_job.values())
    assert hour.reads.documents == 1 + len(runs)
    assert max(hour.reads.page_sizes) <= PAGE_SIZE
