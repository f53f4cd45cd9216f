"""The GitHub Actions a fork gets: what runs when, with which identity, and nothing looser.

actionlint and zizmor (make lint-workflows) check the syntax and the known security smells;
these tests pin down the decisions those tools cannot know: which job may mint an OIDC token,
which may comment, which stacks are previewed and deployed, and that the CLI matches the SDK.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.settings import BootstrapSettings
from policy.scheduler_guardrails.rules.config.deployer_roles import previewer_roles_table

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
AUTH = "google-github-actions/auth"
PULUMI = "pulumi/actions"
_PINNED = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # v\d+\.\d+\.\d+\s*$")


def workflow(name: str) -> dict[str, Any]:
    loaded: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    loaded["on"] = loaded.pop(True, loaded.get("on"))  # YAML 1.1 reads the key `on` as true
    return loaded


ALL = sorted(path.name for path in WORKFLOWS.glob("*.yml"))


def jobs(name: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = workflow(name)["jobs"]
    return found


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in job["steps"] if step.get("uses", "").startswith(f"{action}@")]


def runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def test_the_three_workflows_exist() -> None:
    assert ALL == ["deploy.yml", "preview.yml", "test.yml"]


@pytest.mark.parametrize("name", ALL)
def test_every_action_is_pinned_to_a_commit_with_its_version(name: str) -> None:
    lines = [
        line for line in (WORKFLOWS / name).read_text().splitlines() if re.match(r"^\s*-?\s*uses:", line)
    ]
    assert lines
    assert [line for line in lines if not _PINNED.match(line)] == []


@pytest.mark.parametrize("name", ALL)
def test_least_privilege_permissions(name: str) -> None:
    assert workflow(name)["permissions"] == {}
    for job_name, job in jobs(name).items():
        permissions = job["permissions"]
        assert permissions.get("contents") == "read", job_name
        authenticates = bool(steps_using(job, AUTH))
        comments = any(
            str(s["with"].get("comment-on-pr")).lower() == "true" for s in steps_using(job, PULUMI)
        )
        assert (permissions.get("id-token") == "write") is authenticates, job_name
        assert (permissions.get("pull-requests") == "write") is comments, job_name
        assert set(permissions) <= {"contents", "id-token", "pull-requests"}, job_name


@pytest.mark.parametrize("name", ALL)
def test_no_keys_no_expressions_in_scripts_no_persisted_token(name: str) -> None:
    text = (WORKFLOWS / name).read_text()
    assert "credentials_json" not in text and "secrets." not in text
    for job in jobs(name).values():
        # Values reach scripts through env:, never spliced into the shell source.
        assert [script for script in runs(job) if "${{" in script] == []
        for checkout in steps_using(job, "actions/checkout"):
            assert checkout["with"]["persist-credentials"] is False


# Which account each workflow's jobs impersonate, by repository variable.
ACCOUNT_VARIABLES = {
    "preview.yml": "${{ vars.GCP_PREVIEWER_SERVICE_ACCOUNT }}",
    "deploy.yml": "${{ vars.GCP_DEPLOYER_SERVICE_ACCOUNT }}",
}


@pytest.mark.parametrize("name", ALL)
def test_authentication_is_keyless_from_repository_variables(name: str) -> None:
    authenticating = [job for job in jobs(name).values() if steps_using(job, AUTH)]
    assert bool(authenticating) is (name in ACCOUNT_VARIABLES)
    for job in authenticating:
        for step in steps_using(job, AUTH):
            assert step["with"] == {
                "workload_identity_provider": "${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}",
                "service_account": ACCOUNT_VARIABLES[name],
            }


def test_pull_requests_preview_as_the_previewer_and_only_deployment_jobs_on_main_deploy() -> None:
    """The bootstrap binds the deployer to its deployment environments' subjects and admits
    an environment's token only from the default branch; the previewer to pull request jobs
    that name no environment. The workflows must be written to match."""
    defaults = BootstrapSettings(project="p", repository="o/r")
    assert workflow("deploy.yml")["on"] == {"push": {"branches": [defaults.default_branch]}}
    for job_name, job in jobs("deploy.yml").items():
        if steps_using(job, AUTH):
            assert job["environment"] in defaults.deploy_environments, job_name
    assert set(workflow("preview.yml")["on"]) == {"pull_request"}
    for job in jobs("preview.yml").values():
        assert "environment" not in job
    assert len(set(ACCOUNT_VARIABLES.values())) == 2


@pytest.mark.parametrize("name", ALL)
def test_every_pulumi_step_downloads_plugins_with_the_jobs_token(name: str) -> None:
    """The time and gcp provider plugins come from GitHub releases: unauthenticated, the
    download shares the runner address's rate limit with every other job, and fails with 403."""
    for job in jobs(name).values():
        for step in steps_using(job, PULUMI):
            assert step["env"] == {"GITHUB_TOKEN": "${{ github.token }}"}


def test_the_test_workflow_runs_make_test_and_make_demo_with_everything_they_need() -> None:
    """The fast checks first, then the emulator's jobs side by side: together, every target
    `make test` runs, `make demo` (the README's two commands) and the short soak .ci/run runs."""
    test = workflow("test.yml")
    assert set(test["on"]) == {"pull_request", "push"}
    checks, emulator = test["jobs"]["checks"], test["jobs"]["emulator"]
    assert set(test["jobs"]) == {"checks", "emulator"}
    assert runs(checks) == ["make lint typecheck"]
    assert emulator["needs"] == "checks"
    targets = emulator["strategy"]["matrix"]["target"]
    planned = subprocess.run(
        ["make", "-n", "test"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    test_targets = re.search(r"--output-sync=target ([\w -]+)$", planned, re.MULTILINE)
    assert test_targets, planned
    readme_and_ci = {"demo", "soak-short"}
    assert sorted(targets) == sorted({*test_targets.group(1).split(), *readme_and_ci} - {"lint", "typecheck"})
    [python] = steps_using(emulator, "actions/setup-python")
    assert set(python["with"]["python-version"].split()) == {"3.11", "3.12"}
    assert steps_using(emulator, "actions/setup-java")
    [gcloud] = steps_using(emulator, "google-github-actions/setup-gcloud")
    assert gcloud["with"]["install_components"] == "cloud-firestore-emulator"
    scripts = runs(emulator)
    assert scripts[-1] == 'make "$TARGET"'
    assert emulator["steps"][-1]["env"] == {"TARGET": "${{ matrix.target }}"}
    assert any("sudo apt-get install" in s and "faketime" in s for s in scripts[:-1])


def test_the_preview_workflow_previews_every_stack_with_the_policy_pack_on_the_pull_request() -> None:
    preview = workflow("preview.yml")
    assert set(preview["on"]) == {"pull_request"}
    [job] = preview["jobs"].values()
    stacks = job["strategy"]["matrix"]["stack"]
    assert stacks and all((REPO_ROOT / f"Pulumi.{stack}.yaml").is_file() for stack in stacks)
    [pulumi] = steps_using(job, PULUMI)
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["stack-name"] == "${{ matrix.stack }}"
    assert pulumi["with"]["policyPacks"] == "policy"
    assert pulumi["with"]["comment-on-pr"] is True
    # Authentication comes first, and only for pull requests from this repository.
    names = [step.get("uses", "").split("@")[0] for step in job["steps"]]
    assert names.index(AUTH) < names.index(PULUMI)
    assert job["if"] == "github.event.pull_request.head.repo.full_name == github.repository"


def test_the_deploy_workflow_updates_dev_smoke_tests_it_then_waits_for_prod_reviewers() -> None:
    deploy = workflow("deploy.yml")
    assert deploy["on"] == {"push": {"branches": ["main"]}}
    assert deploy["concurrency"]["cancel-in-progress"] is False
    dev, prod = deploy["jobs"]["dev"], deploy["jobs"]["prod"]
    [up] = steps_using(dev, PULUMI)
    assert (up["with"]["command"], up["with"]["stack-name"], up["with"]["policyPacks"]) == (
        "up",
        "dev",
        "policy",
    )
    assert dev["steps"].index(up) < len(dev["steps"]) - 1
    assert runs(dev)[-1] == "venv/bin/python -m ops smoke --stack dev"
    assert prod["needs"] == "dev" and prod["environment"] == "prod"
    assert prod["if"] == "vars.DEPLOY_PROD == 'true'"
    [up_prod] = steps_using(prod, PULUMI)
    assert (up_prod["with"]["command"], up_prod["with"]["stack-name"]) == ("up", "prod")


def test_the_pulumi_cli_matches_the_pinned_sdk() -> None:
    pinned = re.search(r"^pulumi==(\S+)$", (REPO_ROOT / "requirements.txt").read_text(), re.MULTILINE)
    assert pinned is not None
    versions = {
        step["with"]["pulumi-version"]
        for name in ALL
        for job in jobs(name).values()
        for step in steps_using(job, PULUMI)
    }
    assert versions == {pinned.group(1)}


def test_dependabot_keeps_the_action_pins_current() -> None:
    config = yaml.safe_load((REPO_ROOT / ".github" / "dependabot.yml").read_text())
    assert "github-actions" in {update["package-ecosystem"] for update in config["updates"]}


def test_make_lint_runs_both_workflow_linters_offline() -> None:
    planned = subprocess.run(
        ["make", "-n", "lint"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert re.search(r"/actionlint -shellcheck=\S+/shellcheck$", planned, re.MULTILINE)
    assert re.search(r"/zizmor --offline ", planned)


def test_the_docs_name_every_repository_variable_the_workflows_read() -> None:
    read = {
        variable
        for path in WORKFLOWS.glob("*.yml")
        for variable in re.findall(r"\bvars\.([A-Z0-9_]+)", path.read_text())
    }
    assert read >= {
        "GCP_WORKLOAD_IDENTITY_PROVIDER",
        "GCP_DEPLOYER_SERVICE_ACCOUNT",
        "GCP_PREVIEWER_SERVICE_ACCOUNT",
        "PULUMI_BACKEND_URL",
    }
    documented = set(
        re.findall(r"^\| `([A-Z0-9_]+)` \|", (REPO_ROOT / "docs" / "ci.md").read_text(), re.MULTILINE)
    )
    assert documented == read


def test_the_docs_show_the_previewers_roles_as_the_bootstrap_grants_them() -> None:
    page = (REPO_ROOT / "docs" / "ci.md").read_text()
    table = re.search(r"<!-- previewer-roles:start -->\n(.*?)\n<!-- previewer-roles:end -->", page, re.S)
    assert table is not None and table.group(1) == previewer_roles_table()


def test_the_docs_show_the_providers_condition_as_the_bootstrap_writes_it() -> None:
    page = (REPO_ROOT / "docs" / "ci.md").read_text()
    shown = re.search(r"```text\n(\s*assertion\.repository ==.*?)```", page, re.S)
    assert shown is not None
    written = BootstrapSettings(project="p", repository="<owner>/<repo>").attribute_condition
    assert " ".join(shown.group(1).split()) == written


def test_the_bootstrap_keeps_its_state_in_the_local_backend() -> None:
    project = yaml.safe_load((REPO_ROOT / "bootstrap" / "Pulumi.yaml").read_text(encoding="utf-8"))
    assert project["backend"] == {"url": "file://~"}
