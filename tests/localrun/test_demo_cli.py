"""What the demo decides before it starts anything, and what it makes of the verdicts: the
stack it reads, the jobs it refuses, the speed-up it runs at, its help and its exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import schema
from infra.config.schema import project_name
from infra.settings import stack_config
from infra.settings.loading import load_stack_settings
from localrun import demo
from localrun.compression import BUSY_ROUND_TRIP_SECONDS, CompressedTiming, fitting_speedup
from localrun.timeline import write_timeline
from localrun.verdicts import (
    EXIT_CANNOT_RUN,
    EXIT_JOB_FAILED,
    EXIT_NOT_EXACTLY_ONCE,
    EXIT_OK,
    Verdict,
    exit_code,
)
from tests.support.optional import needs_proxy_kinds

JOB = {"schedule": "*/15 * * * *", "timeZone": "Etc/UTC", "attemptDeadlineSeconds": 60}


@pytest.fixture
def stacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of the forker's stacks, which `--stack NAME` reads."""
    monkeypatch.setattr(demo, "load_settings", lambda stack: load_stack_settings(stack, stacks_dir=tmp_path))
    return tmp_path


def write_stack(folder: Path, name: str, *jobs: dict[str, Any]) -> None:
    config = {
        "gcp:project": "fork-project",
        "gcp:region": "us-central1",
        f"{project_name()}:jobHandler": "jobs.demo:run_demo_job",
        f"{project_name()}:jobs": list(jobs),
    }
    (folder / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))


@pytest.mark.parametrize(
    ("verdicts", "code"),
    [
        ([Verdict.SUCCEEDED] * 3, EXIT_OK),
        ([Verdict.SUCCEEDED, Verdict.FAILED], EXIT_JOB_FAILED),
        ([Verdict.FAILED, Verdict.NEVER], EXIT_NOT_EXACTLY_ONCE),
        ([Verdict.SUCCEEDED, Verdict.DUPLICATE, Verdict.FAILED], EXIT_NOT_EXACTLY_ONCE),
    ],
)
def test_only_runs_that_all_executed_once_and_succeeded_exit_0(verdicts: list[Verdict], code: int) -> None:
    assert exit_code(verdicts) == code


def test_the_default_demo_reads_its_own_stack_and_none_of_the_forkers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[Path] = []
    original = schema.read_yaml

    def spy(path: Path) -> Any:
        read.append(Path(path))
        return original(path)

    monkeypatch.setattr(stack_config, "read_yaml", spy)  # where load_stack_settings reads the files
    settings = demo.load_settings(None)
    assert settings.stack == "demo" and [job.target for job in settings.jobs] == [None]
    assert demo.DEMO_STACKS_DIR / "Pulumi.demo.yaml" in read
    assert not [path for path in read if path.name in ("Pulumi.dev.yaml", "Pulumi.prod.yaml")]


@needs_proxy_kinds
@pytest.mark.parametrize(
    ("target", "says"),
    [
        ({"workflow": {"name": "projects/p/locations/us-central1/workflows/nightly"}}, "workflow proxy"),
        ({"bigquery": {"sample": True}}, "bigquery proxy"),
    ],
)
def test_a_proxy_job_is_refused_up_front_naming_why(
    stacks: Path, capsys: pytest.CaptureFixture[str], target: dict[str, Any], says: str
) -> None:
    write_stack(stacks, "fork", {**JOB, "name": "mine"}, {**JOB, "name": "proxied", **target})
    out = stacks / "out"
    assert demo.main(["--stack", "fork", "--job", "proxied", "--output-dir", str(out)]) == EXIT_CANNOT_RUN
    err = capsys.readouterr().err
    assert says in err and "no stand-in" in err
    assert "starting the Firestore emulator" not in err and not out.exists()


def test_a_job_the_floors_would_refuse_at_x20_runs_at_a_speedup_it_passes(
    stacks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Retries at 15, 45, 105 s outlast the stack's 30 s lease, not the floored one at x20."""
    write_stack(stacks, "fork", {**JOB, "name": "three-retries", "retry": {"retryCount": 3}})
    settings = demo.load_settings("fork")
    job = settings.jobs[0]
    at_20 = CompressedTiming.of(settings, 20.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS, job=job)
    assert any("lease of 120s" in problem for problem in at_20.problems(settings, job))

    fitting = fitting_speedup(settings, job, 20.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS)
    assert 1.0 < fitting < 20.0
    at_fit = CompressedTiming.of(settings, fitting, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS, job=job)
    assert at_fit.problems(settings, job) == []

    # Asked for x20 explicitly, the demo refuses before starting anything, naming what passes.
    out = stacks / "out"
    assert demo.main(["--stack", "fork", "--speedup", "20", "--output-dir", str(out)]) == EXIT_CANNOT_RUN
    assert f"x{fitting:g} passes" in capsys.readouterr().err and not out.exists()


def test_a_speedup_that_passes_is_kept() -> None:
    settings = demo.load_settings(None)
    job = settings.jobs[0]
    assert fitting_speedup(settings, job, 20.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS) == 20.0
    assert fitting_speedup(settings, job, 0.5, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS) == 0.5


def test_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        demo.parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 20)", "(default: 7)", "(default: 20.0)", "(default: 0.25)", "(default: 3)"):
        assert default in shown
    assert "localrun/stacks/Pulumi.demo.yaml" in shown and "Exit codes: 0" in shown


def test_the_timeline_draws_every_run(tmp_path: Path) -> None:
    delivery = {"attempt": 1, "copy": False, "sent_at_s": 0.0, "status": 200, "outcome": "executed"}
    runs = [
        {
            "index": index,
            "schedule_time": f"2026-12-01T0{index}:00:00Z",
            "verdict": verdict.value,
            "deliveries": [{**delivery, "answered_at_s": 1.5, "attempt_id": "a", "fence": 1}],
        }
        for index, verdict in enumerate(Verdict)
    ]
    report = {
        "job": "demo",
        "runs": len(runs),
        "speedup": 20.0,
        "seed": 7,
        "results": runs,
        "verdicts": {verdict.value: 1 for verdict in Verdict},
    }
    path = write_timeline(report, tmp_path / "timeline.png")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_a_job_missing_from_the_demo_stack_points_at_the_forkers_stack(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert demo.main(["--job", "nightly-report", "--output-dir", str(tmp_path / "out")]) == EXIT_CANNOT_RUN
    assert "--stack NAME --job nightly-report" in capsys.readouterr().err
