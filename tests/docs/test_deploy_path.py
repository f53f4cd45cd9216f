"""The deploy path the README, docs/deploy.md and docs/ci.md print, in the parts a test can hold
without a cloud: the CLI version they ask for, one region, the policy pack on every manual
update, the virtualenv that pack runs in (the bootstrap's own backend: tests/bootstrap/)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.config.schema import REPO_ROOT

README = REPO_ROOT / "README.md"
DEPLOY = REPO_ROOT / "docs" / "deploy.md"
CI = REPO_ROOT / "docs" / "ci.md"
POLICY = REPO_ROOT / "docs" / "policy.md"
PATH_PAGES = (README, DEPLOY, CI, POLICY)
POLICY_VENV_PYTHON = REPO_ROOT / "policy" / "venv" / "bin" / "python"


def _shell_lines(page: Path) -> list[str]:
    """The commands of a page's ```sh blocks, one per line, without indentation."""
    blocks = re.findall(r"^ *```sh\n(.*?)^ *```", page.read_text(encoding="utf-8"), re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def _pinned_sdk() -> str:
    text = (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8")
    found = re.search(r"^pulumi==([\d.]+)$", text, re.M)
    assert found, "requirements.txt pins no pulumi SDK"
    return found.group(1)


@pytest.mark.parametrize("page", [README, DEPLOY], ids=lambda page: page.name)
def test_the_cli_version_asked_for_is_the_pinned_sdk(page: Path) -> None:
    text = " ".join(page.read_text(encoding="utf-8").split())
    assert f"Pulumi CLI {_pinned_sdk()} or newer" in text


def test_every_example_uses_the_dev_stacks_region() -> None:
    dev = yaml.safe_load((REPO_ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    region = dev["gcp:region"]
    shown = {
        page.name: set(re.findall(r"pulumi config set gcp:region (\S+)", page.read_text(encoding="utf-8")))
        for page in (README, DEPLOY, CI)
    }
    assert shown == {page: {region} for page in shown}


def test_every_manual_update_and_preview_runs_the_policy_pack() -> None:
    unchecked = [
        f"{page.name}: {line}"
        for page in PATH_PAGES
        for line in _shell_lines(page)
        if re.match(r"pulumi (up|preview)\b", line) and not re.search(r"--policy-pack (\.\./)?policy\b", line)
    ]
    assert unchecked == []


@pytest.mark.parametrize("page", [README, DEPLOY], ids=lambda page: page.name)
def test_the_trial_installs_both_virtualenvs_before_its_first_update(page: Path) -> None:
    lines = _shell_lines(page)
    first_up = next(i for i, line in enumerate(lines) if line.startswith("pulumi up"))
    assert any(line.startswith("make install") for line in lines[:first_up])


def test_make_install_prepares_the_packs_virtualenv_and_clean_removes_it() -> None:
    declared = yaml.safe_load((REPO_ROOT / "policy" / "PulumiPolicy.yaml").read_text(encoding="utf-8"))
    assert declared["runtime"]["options"]["virtualenv"] == "venv"

    def planned(*args: str) -> str:
        return subprocess.run(
            ["make", "-n", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
        ).stdout

    install = planned("-B", "install")
    assert re.search(r"-m venv policy/venv$", install, re.M)
    pip = r"^policy/venv/bin/python -m pip install .*-r policy/requirements\.txt .*\./function$"
    assert re.search(pip, install, re.M)
    assert re.search(r"^rm -rf .*\bpolicy/venv\b", planned("clean"), re.M)


@pytest.mark.skipif(not POLICY_VENV_PYTHON.exists(), reason="policy/venv not made (make install)")
def test_the_pack_loads_in_its_own_virtualenv() -> None:
    # What Pulumi does before it serves the pack: run policy/__main__.py from policy/ with the
    # pack's virtualenv (here without starting the analyzer, which needs the engine).
    script = (
        "import runpy; runpy.run_path('__main__.py', run_name='pack');"
        "from scheduler_guardrails.policies import POLICIES; print(len(POLICIES))"
    )
    result = subprocess.run(
        [str(POLICY_VENV_PYTHON), "-c", script],
        cwd=REPO_ROOT / "policy",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) > 0


def test_ci_reads_the_bootstraps_outputs_before_the_main_stacks_change_backend() -> None:
    lines = _shell_lines(CI)
    first_login = next(i for i, line in enumerate(lines) if line.startswith("pulumi login"))
    read = [line for line in lines[:first_login] if re.match(r"[A-Z_]+=\"\$\(pulumi stack output ", line)]
    assert {line.split("=", 1)[0] for line in read} == {"STATE_BUCKET", "SECRETS_PROVIDER"}
    assert all("--stack ci" in line for line in read)
    assert not any("$(cd bootstrap" in line for line in lines)


def test_a_trial_stack_moves_with_its_secrets_provider_changed_first() -> None:
    lines = _shell_lines(CI)
    order = [
        "pulumi stack change-secrets-provider",
        "pulumi stack export",
        'pulumi login "$STATE_BUCKET"',
        'pulumi stack init dev --secrets-provider "$SECRETS_PROVIDER"',
        "pulumi stack import",
        "pulumi preview --policy-pack policy --stack dev",
        "pulumi stack rm dev --force --preserve-config",
    ]
    start = next(i for i, line in enumerate(lines) if line.startswith(order[0]))
    positions = [next(i for i, line in enumerate(lines[start:]) if line.startswith(step)) for step in order]
    assert positions == sorted(positions)
