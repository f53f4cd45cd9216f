"""The benchmark still runs and still proves what is counted (never what is timed).

Wall-clock numbers depend on the machine, so they are the report's business; RPCs per run,
executions per storm and errors are facts that must hold on any machine, with Firestore on
loopback or behind the modelled round trip alike.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

import exactly_once
from bench import chart, cpu_history
from bench.cpu import CPU_METRIC, CPU_UNIT
from bench.cpu_quota import Unavailable
from bench.report import CHART_SUFFIX
from bench.run import QUICK_AUDIT_JOBS, QUICK_SCALE_JOBS, main, merge, run_bench, save
from bench.scale import AUDIT_MISSING
from bench.served import CLIENT_THREADS, many_jobs_batches
from exactly_once.audit.reads import PAGE_SIZE
from exactly_once.config import DEFAULT_TIME_LIMIT_SECONDS
from exactly_once.delivery.scheduler_request import JOB_NAME_HEADER, run_key_from_headers

# Started first (tests/conftest.py): it serves both flows at several round trips.
pytestmark = pytest.mark.slow_module

RTTS = (0.0, 2.0)


@pytest.fixture(scope="module")
def report(emulator_host):
    return run_bench(
        emulator_host,
        cases=[1, 2, 3],
        repeats=1,
        rtts=RTTS,
        storms=1,
        quick=True,
        progress=lambda _: None,
        http=False,
    )


def test_first_delivery_costs_ours_exactly_two_rpcs_at_every_rtt(report):
    rows = report.rows("1.", "Firestore RPCs per run")
    assert sorted(row.rtt_ms for row in rows) == list(RTTS)
    for row in rows:
        assert row.ours.min == row.ours.max == 2
        assert row.baseline.min == 6  # the documented flow's two read-then-write transactions


def test_duplicate_of_completed_run_costs_ours_two_rpcs_elsewhere_and_none_here(report):
    for rtt in RTTS:
        elsewhere = report.find(
            "2. duplicate of a completed run, another", "Firestore RPCs per delivery", rtt
        )
        assert elsewhere.ours.min == elsewhere.ours.max == 2
        same = report.find("2. duplicate of a completed run, same", "Firestore RPCs per delivery", rtt)
        assert same.ours.min == same.ours.max == 0
        assert same.baseline.min == 3  # the documented flow reads in a transaction every time


def test_storm_executes_each_run_once_without_errors_at_every_rtt(report):
    assert sorted(report.storm_results) == list(RTTS)
    for by_label in report.storm_results.values():
        storms = by_label["ours"]
        assert [storm.executions for storm in storms] == [1] * len(storms)
        assert [storm.errors for storm in storms] == [0] * len(storms)
        assert all(len(storm.latencies_ms) == 64 for storm in storms)


def test_every_case_reports_the_serving_process_cpu_beside_its_latency(report):
    for case in (
        "1. first delivery",
        "2. duplicate of a completed run, another",
        "2. duplicate of a completed run, same",
    ):
        for rtt in RTTS:
            cpu, latency = (report.find(case, name, rtt) for name in (CPU_METRIC, "latency"))
            assert cpu.unit == CPU_UNIT
            assert cpu.ours.n == cpu.baseline.n == latency.ours.n  # one sample per delivery
            assert cpu.ours.min > 0 and cpu.baseline.min > 0
    storms = report.rows("3. duplicate storm", CPU_METRIC)
    assert sorted(row.rtt_ms for row in storms) == list(RTTS)
    assert all(row.ours.min > 0 and row.baseline.min > 0 for row in storms)
    table = report.markdown()
    assert "### CPU per delivery and per audited run" in table
    for label in (
        "first delivery",
        "duplicate, another instance",
        "duplicate, same instance",
        "storm, per delivery",
    ):
        assert f"\n| {label}" in table
    # Cases 1-2 over HTTP were not run: nothing was confined, so no quota was set up.
    assert report.cpu_quota == "not asked for" and report.at_quota == []
    assert report.as_json()["metrics_at_cpu_quota"] == []


def test_report_renders_every_row_and_the_counted_targets(report):
    table = report.markdown()
    per_rtt = len(RTTS)
    assert table.count("| 1. first delivery") == 3 * per_rtt  # latency, RPCs and CPU
    assert table.count("| 3. duplicate storm") == 4 * per_rtt
    status = {verdict.target: verdict.status for verdict in report.targets()}
    assert status["case 1: exactly 2 Firestore RPCs per first delivery (ours), at every RTT"] == "met"
    assert status["case 3: zero errors (ours), at every RTT"] == "met"
    assert status["case 3: exactly one execution per run (ours), at every RTT"] == "met"
    # Judged at 2 ms, whatever the verdict: the target is in the report.
    assert status["RTT 2 ms: no case slower than the baseline (latency medians, storm errors)"] in (
        "met",
        "NOT met",
    )
    # RTT 10 ms was not run: its targets say so.
    first_at_10 = "RTT 10 ms, case 1, first delivery: at least 2.7x faster than the baseline (median)"
    assert f"- {first_at_10}: not measured (RTT 10 ms not run)" in table


def test_saved_report_has_the_rtt_of_every_modelled_row_and_a_chart(report, tmp_path):
    chart_path = save(report, tmp_path / "run")
    data = json.loads((tmp_path / "run.json").read_text())
    assert {row["rtt_ms"] for row in data["metrics"]} == set(RTTS)
    assert set(data["one_read_ms"]) == {"0", "2"}
    assert chart_path == tmp_path / f"run{CHART_SUFFIX}"
    svg = chart_path.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "round-trip time to Firestore (ms)" in svg  # text stays text
    assert f"]({chart_path.name})" in (tmp_path / "run.md").read_text()


def test_the_chart_depends_only_on_the_numbers(report, tmp_path):
    data = report.as_json()
    chart.draw(data, tmp_path / "a.svg")
    chart.draw(data, tmp_path / "b.svg")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_the_cpu_history_keeps_one_entry_per_release_and_draws_them(report, tmp_path, monkeypatch):
    history_path = tmp_path / cpu_history.HISTORY_FILE
    data = report.as_json()
    cpu_history.record(data, history_path)
    (entry,) = cpu_history.record(data, history_path)  # the same release again: replaced
    assert entry["version"] == exactly_once.__version__
    # No HTTP in this run: the in-process rows, at the lowest RTT.
    first = report.find("1. first delivery", CPU_METRIC, min(RTTS))
    assert entry["cpu_ms_per_delivery"]["first"] == {
        "ours": round(first.ours.median, 3),
        "baseline": round(first.baseline.median, 3),
    }
    assert set(entry["cpu_ms_per_delivery"]) == {"first", "elsewhere", "same", "storm"}
    assert entry["cpu_us_per_audited_run"] == {"ours": None, "baseline": None}  # case 7 not run
    monkeypatch.setattr(exactly_once, "__version__", "9.9.9")
    history = cpu_history.record(data, history_path)
    assert [item["version"] for item in history] == [entry["version"], "9.9.9"]
    cpu_history.draw(history, tmp_path / "a.svg")
    cpu_history.draw(history, tmp_path / "b.svg")
    svg = (tmp_path / "a.svg").read_text()
    assert (tmp_path / "b.svg").read_text() == svg  # the bytes depend only on the numbers
    assert "9.9.9" in svg and "CPU per delivery" in svg


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rtt", "ten"], "--rtt: numbers of milliseconds"),
        (["--rtt", "0,-2"], "none negative"),
        (["--cases", "1,9"], "--cases: choose from"),
        (["--storms", "0", "--quick"], "at least 1"),
        (["--cases", "1,7", "--merge"], "only case 7 is merged"),
    ],
)
def test_bad_arguments_are_named_before_anything_starts(argv, message, monkeypatch):
    monkeypatch.setattr("bench.run.firestore_emulator", _no_emulator)
    with pytest.raises(SystemExit, match=message):
        main(argv)


def _no_emulator() -> Path:
    raise AssertionError("the emulator must not be started for bad arguments")


def test_scale_case_audits_a_small_hour_exactly_and_counts_its_reads(emulator_host, tmp_path):
    report = run_bench(emulator_host, cases=[7], repeats=1, quick=True, progress=lambda _: None)
    assert report.scale is not None
    assert [costs.jobs for costs in report.scale.stacks] == list(QUICK_SCALE_JOBS)
    audit = report.scale.audit
    # Every run of the hour judged (each job's 60 and the audit's own), exactly those left out missed.
    assert (audit.jobs, audit.runs, audit.missed) == (
        QUICK_AUDIT_JOBS,
        QUICK_AUDIT_JOBS * 60 + 1,
        AUDIT_MISSING,
    )
    # One batched get for the audit's own record, then every job's runs together in full pages.
    assert (audit.pages, audit.documents) == (1 + math.ceil(audit.runs / PAGE_SIZE), 1 + audit.runs)
    assert "### Case 7" in report.markdown()
    assert report.as_json()["scale"]["audit"]["documents"] == audit.documents
    # The same hour audited again in a process at a sixth of a vCPU (bench/confined_audit.py
    # refuses one that judged other runs), or the one line saying why it could not be.
    confined = report.scale.confined
    if isinstance(confined, Unavailable):
        assert f"The audit at a CPU quota was not run: {confined.reason}." in report.markdown()
    else:
        assert confined is not None and (confined.runs, confined.missed) == (audit.runs, audit.missed)
        assert confined.cpu_seconds > 0 and confined.time_limit_seconds == DEFAULT_TIME_LIMIT_SECONDS
        assert f"against the {DEFAULT_TIME_LIMIT_SECONDS:g} s time limit" in report.markdown()
    assert report.as_json()["scale"]["audit"]["cpu_us_per_run"] > 0
    assert "| audited run (case 7," in report.markdown()

    # Merged into saved results, case 7 replaces its own section and leaves the rest as it was.
    saved = tmp_path / "latest"
    saved.with_suffix(".json").write_text(json.dumps({"cases": [1, 2], "metrics": [{"case": "1."}]}))
    saved.with_suffix(".md").write_text("### Cases 1-3\n\nrow\n\n### Targets\n\n- met\n")
    merge(report, saved)
    merge(report, saved)
    data = json.loads(saved.with_suffix(".json").read_text())
    assert data["cases"] == [1, 2, 7] and data["metrics"] == [{"case": "1."}]
    assert data["scale"]["audit"]["runs"] == audit.runs
    text = saved.with_suffix(".md").read_text()
    assert text.startswith("### Cases 1-3\n\nrow\n\n### Case 7")
    assert text.count("### Case 7") == 1 and text.endswith("### Targets\n\n- met\n")
