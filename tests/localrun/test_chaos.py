"""The local Cloud Scheduler against the real function and the Firestore emulator."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import yaml
from google.cloud import firestore

from infra.config.schema import FUNCTION_DIR, REPO_ROOT, project_name
from infra.settings.loading import load_stack_settings
from localrun.demo import DEMO_STACKS_DIR, load_settings
from localrun.faults import Fault, FaultRates, RunFaults
from localrun.simulation import SimulationOptions
from policy.scheduler_guardrails.rules.timing import rules as timing
from policy.scheduler_guardrails.rules.timing.rules import RetryConfig
from tests.support.bounded_simulation import simulate_bounded
from tests.support.doc_examples import example_source

# Started first (tests/conftest.py): it local scheduler runs under every fault, each waiting out leases.
pytestmark = pytest.mark.slow_module


# A hard bound on a whole simulation, not a performance assertion: a hang fails, it never waits forever.
@pytest.mark.chaos
def test_every_run_executes_exactly_once_under_every_fault(emulator_host, project, tmp_path):
    settings = load_settings(None)
    job = settings.jobs[0]
    assert not [v for v in timing.check_job_timing(settings.job_timing(job)) if not v.advisory]
    options = SimulationOptions(
        runs=24,
        seed=11,
        speedup=20.0,
        interval_seconds=0.2,
        rates=FaultRates(duplicate=0.3, lost_ack=0.15, slow=0.2, crash=0.1, fail=0.15),
    )
    report = simulate_bounded(
        settings=settings,
        job=job,
        options=options,
        emulator_host=emulator_host,
        firestore_project=project,
        log_dir=tmp_path,
    )

    assert report["runs"] == 24
    assert {kind: n for kind, n in report["faults_injected"].items() if n == 0} == {}
    assert report["instance_crashes"] >= 1 and report["instance_restart_errors"] == []
    assert report["attempts_ended"] >= 1  # a slow job, ended with its instance by the watchdog
    bad = [(r["index"], r["executions"], r["deliveries"]) for r in report["results"] if r["executions"] != 1]
    assert bad == []
    assert (report["exactly_once"], report["duplicate"], report["never"]) == (24, 0, 0)
    assert report["verdicts"]["succeeded"] == 24
    assert report["ok"]
    # The function really was hit more often than it ran: the faults produced redeliveries.
    assert report["deliveries"] > report["runs"]


def test_a_retry_policy_that_ends_inside_the_lease_loses_a_crashed_run(emulator_host, project, tmp_path):
    settings = load_settings(None)
    # One retry, 10 s after the crash: the crashed attempt's lease (30 s) still blocks the run.
    short = RetryConfig(retry_count=1, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3)
    job = dataclasses.replace(settings.jobs[0], retry=short)
    rules = {v.rule for v in timing.check_job_timing(settings.job_timing(job))}
    assert "retry-outlives-lease" in rules

    report = simulate_bounded(
        settings=settings,
        job=job,
        options=SimulationOptions(runs=1, speedup=20.0),
        emulator_host=emulator_host,
        firestore_project=project,
        log_dir=tmp_path,
        plan=[RunFaults(primary=Fault.CRASH)],
    )

    (run,) = report["results"]
    assert report["faults_injected"][Fault.CRASH.value] == 1
    assert [d["outcome"] for d in run["deliveries"]] == ["dropped", "in_progress"]
    assert run["retries_exhausted"] and run["executions"] == 0 and run["verdict"] == "never_executed"
    assert "scheduler gave up" in run["reason"]
    assert (report["never"], report["ok"]) == (1, False)


@pytest.mark.chaos
def test_every_run_executes_exactly_once_with_every_firestore_round_trip_half_a_second_late(
    emulator_host, project, tmp_path
):
    """The demo's own scenario (default rates and seed: a crash, a slow job, a failure, lost
    answers, duplicates) with the function's Firestore half a second away: nothing may depend
    on a Firestore call being fast."""
    settings = load_settings(None)
    job = settings.jobs[0]
    options = SimulationOptions(runs=8, firestore_rtt_seconds=0.5)
    assert options.compressed(settings, job).problems(settings, job) == []

    report = simulate_bounded(
        settings=settings,
        job=job,
        options=options,
        emulator_host=emulator_host,
        firestore_project=project,
        log_dir=tmp_path,
    )

    # Every instance reached Firestore through the delay, and not only once: crashed and
    # ended instances came back with new channels.
    assert report["firestore_connections_delayed"] > options.instances
    assert report["faults_injected"][Fault.SLOW.value] >= 1 and report["attempts_ended"] >= 1
    assert report["faults_injected"][Fault.CRASH.value] >= 1 and report["instance_crashes"] >= 1
    assert report["instance_restart_errors"] == []
    bad = [(r["index"], r["executions"], r["deliveries"]) for r in report["results"] if r["executions"] != 1]
    assert bad == []
    assert (report["exactly_once"], report["duplicate"], report["never"]) == (8, 0, 0)
    assert report["ok"]


@pytest.mark.chaos
def test_a_job_of_your_own_written_as_the_docs_show_passes_the_demo(emulator_host, project, tmp_path):
    """`make demo ARGS="--job my-report"` for a fork's job: docs/jobs.md's module in function/jobs/
    and a job naming it in Pulumi.dev.yaml. Its executions are counted from the function's log
    lines, and only the delivery faults are injected (its body speaks no sleep or fail)."""
    root = tmp_path / "fork"
    (root / "function").mkdir(parents=True)
    shutil.copytree(
        FUNCTION_DIR, root / "function", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    (root / "function" / "jobs" / "my_job.py").write_text(example_source("jobs/my_job.py"))
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    dev = yaml.safe_load((DEMO_STACKS_DIR / "Pulumi.demo.yaml").read_text())
    jobs = dev["config"][f"{project_name()}:jobs"]
    jobs.append({**jobs[0], "name": "my-report", "handler": "jobs.my_job:run", "body": {"region": "apac"}})
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(dev))
    settings = load_stack_settings("dev", root=root)
    job = settings.job_named("my-report")

    report = simulate_bounded(
        settings=settings,
        job=job,
        options=SimulationOptions(runs=8, rates=FaultRates(duplicate=0.4, lost_ack=0.3)),
        emulator_host=emulator_host,
        firestore_project=project,
        log_dir=tmp_path / "demo",
        function_dir=root / "function",
    )

    injected = report["faults_injected"]
    assert injected["duplicate"] >= 1 and injected["lost_ack"] >= 1
    assert (injected["slow"], injected["crash"], injected["fail"]) == (0, 0, 0)
    assert report["deliveries"] > report["runs"]
    assert (report["exactly_once"], report["duplicate"], report["never"], report["ok"]) == (8, 0, 0, True)
    # The job's own side effect agrees: one report per run, written by the region it was given.
    reports = list(firestore.Client(project=project).collection("reports").stream())
    assert len(reports) == 8 and {doc.get("region") for doc in reports} == {"apac"}
