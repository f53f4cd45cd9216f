"""The benchmark still runs and still proves what is counted (never what is timed).

Wall-clock numbers depend on the machine, so they are the report's business; RPCs per run,
executions per storm and errors are facts that must hold on any machine.
"""

from __future__ import annotations

import itertools

import pytest

from bench.run import run_bench
from bench.served import CLIENT_THREADS, many_jobs_batches
from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER, run_key_from_headers


@pytest.fixture(scope="module")
def report(emulator_host):
    return run_bench(emulator_host, cases=[1, 2, 3], repeats=1, quick=True)


def test_first_delivery_costs_ours_exactly_two_rpcs(report):
    rpcs = report.find("1.", "Firestore RPCs per run")
    assert rpcs.ours.min == rpcs.ours.max == 2
    assert rpcs.baseline.min == 6  # the sample's two read-then-write transactions


def test_duplicate_of_completed_run_costs_ours_two_rpcs(report):
    rpcs = report.find("2. duplicate of a completed run, another instance", "Firestore RPCs per delivery")
    assert rpcs.ours.min == rpcs.ours.max == 2


def test_duplicate_on_the_same_instance_costs_ours_no_rpc(report):
    rpcs = report.find("2. duplicate of a completed run, same instance", "Firestore RPCs per delivery")
    assert rpcs.ours.min == rpcs.ours.max == 0
    assert rpcs.baseline.min == 3  # the sample reads in a transaction every time


def test_storm_executes_each_run_once_without_errors(report):
    storms = report.storms["ours"]
    assert storms
    assert [storm.executions for storm in storms] == [1] * len(storms)
    assert [storm.errors for storm in storms] == [0] * len(storms)
    assert all(len(storm.latencies_ms) == 64 for storm in storms)


def test_report_renders_every_row_and_the_counted_targets(report):
    table = report.markdown()
    assert table.count("\n| 1.") == 2 and table.count("\n| 3.") == 3
    met = {check["target"]: check["met"] for check in report.targets()}
    assert met["case 1: exactly 2 Firestore RPCs per first delivery (ours)"]
    assert met["case 3: zero errors (ours)"]
    assert met["case 3: exactly one execution per run (ours)"]


def test_many_jobs_case_sends_each_run_of_each_job_exactly_once():
    batches = many_jobs_batches("smoke", jobs=10, runs_per_job=3)
    deliveries = [headers for batch in batches for headers in batch]
    keys = [run_key_from_headers(headers) for headers in deliveries]
    assert len(deliveries) == len({key.run_id for key in keys}) == 30
    assert len({key.job_name for key in keys}) == 10
    assert len(batches) == CLIENT_THREADS
    # Each client moves from job to job rather than firing one job's runs back to back.
    for batch in batches:
        assert all(a[JOB_NAME_HEADER] != b[JOB_NAME_HEADER] for a, b in itertools.pairwise(batch))
