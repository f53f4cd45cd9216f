"""A project of its own for each test (the template's Pulumi.yaml, its function/), and the
Pulumi CLI on PATH as a stand-in, or no CLI at all."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config.schema import FUNCTION_DIR, PROJECT_FILE, REPO_ROOT, read_yaml
from tests.infra.conftest import NAMESPACE
from tests.support.pulumi_cli import StandInPulumi, put_pulumi_on_path, take_pulumi_off_path

ENVIRONMENT = "platform/gcp-prod"
# What the environment holds for the stack: its project and region, and a provider's token.
FROM_ENVIRONMENT = {"gcp:project": "esc-project", "gcp:region": "us-east1", "gcp:accessToken": "ya29.token"}
NIGHTLY = {
    "name": "nightly",
    "schedule": "0 3 * * *",
    "handler": "jobs.demo:run_demo_job",
    "timeZone": "Europe/Berlin",
    "attemptDeadlineSeconds": 60,
    "retry": {"retryCount": 3, "minBackoffSeconds": 60, "maxBackoffSeconds": 600, "maxDoublings": 2},
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder: the template's Pulumi.yaml, and its function/ (read, never written)."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO_ROOT / PROJECT_FILE, root / PROJECT_FILE)
    (root / FUNCTION_DIR.name).symlink_to(FUNCTION_DIR, target_is_directory=True)
    return root


@pytest.fixture
def pulumi_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StandInPulumi:
    return put_pulumi_on_path(tmp_path / "bin", monkeypatch)


@pytest.fixture
def no_pulumi_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    take_pulumi_off_path(monkeypatch)


def write_stack(folder: Path, stack: str, text: str) -> Path:
    path = folder / f"Pulumi.{stack}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def esc_stack_text(environment_block: str = f"environment:\n  - {ENVIRONMENT}\n") -> str:
    """A stack that takes its project and region from an environment, and sets its jobs."""
    return environment_block + yaml.safe_dump({"config": {f"{NAMESPACE}:jobs": [NIGHTLY]}})


def resolved(stack_config: dict[str, Any], environment: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config the CLI resolves for a stack: Pulumi.yaml's defaults, then the environment's
    values, then the stack file's, which win."""
    declared = read_yaml(REPO_ROOT / PROJECT_FILE).get("config") or {}
    defaults = {f"{NAMESPACE}:{key}": schema["default"] for key, schema in declared.items()}
    return {**defaults, **(environment or {}), **stack_config}
