"""The demo tells a forker's job the truth: a run that failed is never a PASS, and the reason
is on the terminal. Each job runs in a fork of its own (function/ with the job's module, and a
stack file naming it), served by the real function on the Firestore emulator."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config.schema import FUNCTION_DIR, REPO_ROOT, project_name
from infra.settings.loading import load_stack_settings
from localrun.faults import FaultRates
from localrun.report import reasons, verdict_line
from localrun.simulation import SimulationOptions
from localrun.verdicts import EXIT_JOB_FAILED, EXIT_NOT_EXACTLY_ONCE, Verdict, exit_code
from tests.support.bounded_simulation import simulate_bounded

FORKER_JOBS = Path(__file__).with_name("forker_jobs.py")
# Every retry after the 30 s lease a crashed attempt leaves behind, as the timing rules ask.
RETRY = {"retryCount": 1, "minBackoffSeconds": 40, "maxBackoffSeconds": 300, "maxDoublings": 3}


def fork_with(tmp_path: Path, job: dict[str, Any]) -> Path:
    """A fork whose stack `fork` holds `job`, its function/ holding tests' forker_jobs."""
    root = tmp_path / "fork"
    shutil.copytree(FUNCTION_DIR, root / "function", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(FORKER_JOBS, root / "function" / "jobs" / "forker_jobs.py")
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    stack = {
        "config": {
            "gcp:project": "fork-project",
            "gcp:region": "us-central1",
            f"{project_name()}:jobHandler": "jobs.demo:run_demo_job",
            f"{project_name()}:jobs": [
                {
                    "schedule": "*/15 * * * *",
                    "timeZone": "Etc/UTC",
                    "attemptDeadlineSeconds": 60,
                    "retry": RETRY,
                    **job,
                }
            ],
        }
    }
    (root / "Pulumi.fork.yaml").write_text(yaml.safe_dump(stack))
    return root


def demo_of(
    tmp_path: Path, emulator_host: str, project: str, job: dict[str, Any], rates: FaultRates
) -> dict[str, Any]:
    root = fork_with(tmp_path, job)
    settings = load_stack_settings("fork", root=root)
    return simulate_bounded(
        settings=settings,
        job=settings.jobs[0],
        options=SimulationOptions(runs=2, instances=1, rates=rates),
        emulator_host=emulator_host,
        firestore_project=project,
        log_dir=tmp_path / "demo",
        function_dir=root / "function",
    )


NO_FAULTS = FaultRates(duplicate=0, lost_ack=0, slow=0, crash=0, fail=0)


@pytest.mark.chaos
def test_a_return_value_that_is_not_json_is_a_terminal_failure_never_a_pass(emulator_host, project, tmp_path):
    job = {"name": "returns-a-datetime", "handler": "jobs.forker_jobs:returns_a_datetime"}
    report = demo_of(tmp_path, emulator_host, project, job, NO_FAULTS)

    assert [(r["executions"], r["verdict"]) for r in report["results"]] == [(1, "failed_terminal")] * 2
    assert all("return value" in r["reason"] for r in report["results"])
    assert not report["ok"] and report["verdicts"]["failed_terminal"] == 2
    assert verdict_line(report).startswith("FAIL: of 2 runs, 0 executed once and succeeded, 2 executed once")
    assert all("failed terminally: the job's return value" in line for line in reasons(report))
    assert exit_code([Verdict(r["verdict"]) for r in report["results"]]) == EXIT_JOB_FAILED


@pytest.mark.chaos
def test_a_body_typo_fails_terminally_and_every_answer_says_why(emulator_host, project, tmp_path):
    """Every first answer is lost, so each run's retry is a duplicate of a terminally failed
    run: it answers the reason the ledger recorded, and the run still executed once."""
    job = {"name": "body-typo", "body": {"sleep_secnds": 1}}
    report = demo_of(tmp_path, emulator_host, project, job, FaultRates(0, 1.0, 0, 0, 0))

    for run in report["results"]:
        assert (run["executions"], run["verdict"], run["acknowledged"]) == (1, "failed_terminal", True)
        assert "sleep_secnds" in run["reason"]
        answers = [(d["outcome"], d["error"]) for d in run["deliveries"]]
        assert answers == [
            ("lost_ack:failed_terminal", run["reason"]),
            ("duplicate_completed", run["reason"]),
        ]
    assert not report["ok"]
    assert exit_code([Verdict(r["verdict"]) for r in report["results"]]) == EXIT_JOB_FAILED


@pytest.mark.chaos
def test_a_job_that_raises_on_every_attempt_never_executes_and_says_why(emulator_host, project, tmp_path):
    job = {"name": "raises-value-error", "handler": "jobs.forker_jobs:raises_value_error"}
    report = demo_of(tmp_path, emulator_host, project, job, NO_FAULTS)

    for run in report["results"]:
        assert (run["executions"], run["verdict"], run["retries_exhausted"]) == (0, "never_executed", True)
        assert [d["status"] for d in run["deliveries"]] == [500, 500]
        assert (
            "failed_released on 2 attempt(s)" in run["reason"]
            and "ValueError('no report for" in run["reason"]
        )
        assert "scheduler gave up" in run["reason"]
    assert verdict_line(report).startswith("FAIL: of 2 runs, 0 executed once and succeeded, 0 executed once")
    assert exit_code([Verdict(r["verdict"]) for r in report["results"]]) == EXIT_NOT_EXACTLY_ONCE
