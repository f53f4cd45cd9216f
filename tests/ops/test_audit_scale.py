"""The hourly audit of a large stack on the emulator: an hour of jobs that each run every minute,
every run completed but a scattered few, judged as the audit job judges it. It must report
exactly the runs that were left out, and read each expected run's record once, in the pages
the code promises; and that audits of a backlog larger than each one's budget judge it between
them, each run once.

`make test` runs it at 100 jobs (6,000 runs: seeding them is most of its time); `make bench`
case 7 runs the same seeding and audit at 1,000 jobs (60,000 runs) and reports its time.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

from exactly_once import log_fields
from exactly_once.audit.reads import PAGE_SIZE
from exactly_once.delivery.scheduler_request import format_rfc3339
from tests.support.audit_scale import BATCH_WRITES, audit_an_hour, audit_in_steps

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
    # One page for the audit's own record (the stack's target), then every job's runs together,
    # in pages of whole instants (each one measured against the audit's time) filled as far as
    # the next instant allows: every expected run's record asked for exactly once.
    instant = JOBS + 1  # the most runs one instant holds: every job's, and the audit's own
    assert hour.reads.documents == 1 + len(runs)
    assert max(hour.reads.page_sizes) <= PAGE_SIZE
    assert all(size > PAGE_SIZE - instant for size in hour.reads.page_sizes[1:-1])
    # An instant's 100 runs fill a page's 500 ids evenly: as many gets as full pages hold them.
    assert hour.reads.pages == 1 + math.ceil(len(runs) / PAGE_SIZE)
    # Each record decoded from its protobuf: no snapshot built, no record copied whole, no deep
    # copy of anything (the client library's way cost the audit most of its CPU).
    assert (hour.reads.snapshots, hour.reads.whole_copies, hour.reads.deep_copies) == (0, 0, 0)


STEP_JOBS = 10
BUDGET = 250


def test_a_backlog_beyond_one_audits_budget_is_judged_by_the_next_audits_each_run_once(project) -> None:
    steps = audit_in_steps(project, STEP_JOBS, 7, budget=BUDGET, minutes_apart=1, audits=6)
    outcomes = steps.outcomes
    # An hour of 10 every-minute jobs (601 runs) is more than two budgets of 250: three audits.
    assert len(outcomes) == 3
    assert all("left_for_next" in outcome.output for outcome in outcomes[:-1])
    assert "left_for_next" not in outcomes[-1].output
    for outcome in outcomes[:-1]:
        assert outcome.output["left_for_next"]["why"] == f"the cap of {BUDGET} runs was reached"
        assert BUDGET - STEP_JOBS - 1 <= outcome.output["judged"] <= BUDGET
        (summary,) = outcome.events(log_fields.AUDIT_SUMMARY)
        assert summary["left_until"] == outcome.output["left_for_next"]["until"]
    # Back-to-back spans: each audit starts exactly where the one before stopped.
    for before, after in itertools.pairwise(outcomes):
        assert after.output["judged_from"] == before.output["judged_until"]
    # Every run judged by exactly one audit: each read its own run, then records no other read.
    judged_ids = [asked[1:] for asked in steps.asked]
    assert [len(ids) for ids in judged_ids] == [outcome.output["judged"] for outcome in outcomes]
    every = [run_id for ids in judged_ids for run_id in ids]
    assert len(every) == len(set(every)) and set(every) == set(steps.run_ids)
    assert sum(outcome.output["judged"] for outcome in outcomes) == len(steps.runs)
    # Exactly the runs left out are reported, each once, by whichever audit judged it.
    reported = [event for outcome in outcomes for event in outcome.events(log_fields.MISSED_RUN)]
    assert sorted((line["job"], line["schedule_time"]) for line in reported) == sorted(
        (job, format_rfc3339(time)) for job, time in steps.missing
    )
