"""A first `pulumi up` on a fresh project, and many stacks in one project, under mocks.

Stacks are read from throwaway copies of the repository's stack files, as a platform engineer
would create them (`pulumi stack init staging`, same config).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from infra.component import REQUIRED_APIS
from infra.config.schema import REPO_ROOT, project_name
from infra.plan.audit_job import with_audit_job
from infra.plan.needs import needs_token_check, project_roles, runtime_grants
from infra.settings.environment import job_table
from infra.settings.loading import load_stack_settings
from infra.settings.timing_checks import timing_advisories
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from policy.scheduler_guardrails.rules.timing import advisories
from tests.infra.conftest import build, valid_job, valid_values
from tests.support.optional import needs_proxy_kinds
from tests.support.stack_tables import shipped_table
from tests.support.stacks import FIXTURE_STACKS, fixture_stack
from tools.mocked_program import OFFSET, SLEEP, MockedResource, MockedStack, mock_stack

DATABASE = "gcp:firestore/database:Database"
FIELD = "gcp:firestore/field:Field"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
JOB = "gcp:cloudscheduler/job:Job"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
ACCOUNT = "gcp:serviceaccount/account:Account"

# The input that names each resource in Google Cloud (its physical id, within the project).
_PHYSICAL_ID: dict[str, tuple[str, ...]] = {
    ACCOUNT: ("accountId",),
    FUNCTION: ("location", "name"),
    JOB: ("region", "name"),
    "gcp:artifactregistry/repository:Repository": ("location", "repositoryId"),
    "gcp:workflows/workflow:Workflow": ("region", "name"),
    DATABASE: ("name",),
    FIELD: ("database", "collection", "field"),
    PROJECT_MEMBER: ("role", "member", "condition"),
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember": ("name", "role", "member"),
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": ("repository", "role", "member"),
    "gcp:logging/metric:Metric": ("name",),
    "gcp:bigquery/dataset:Dataset": ("datasetId",),
    "gcp:bigquery/datasetIamMember:DatasetIamMember": ("datasetId", "role", "member"),
    "gcp:cloudrunv2/job:Job": ("location", "name"),
    "gcp:cloudrunv2/jobIamMember:JobIamMember": ("name", "role", "member"),
    # Google numbers alert policies itself; the display name is what an on-call tells them by.
    "gcp:monitoring/alertPolicy:AlertPolicy": ("displayName",),
}
# Not named by the program: APIs are shared by every stack on purpose (never disabled on
# destroy), buckets are auto-named by Pulumi with a random suffix, sleeps exist only in state.
_SHARED_OR_AUTO_NAMED = {
    "gcp:projects/service:Service",
    "gcp:storage/bucket:Bucket",
    "gcp:storage/bucketObject:BucketObject",
    SLEEP,
    OFFSET,
    # Google numbers dashboards itself.
    "gcp:monitoring/dashboard:Dashboard",
}


def physical_ids(stack: MockedStack) -> set[tuple[str, str]]:
    ids = set()
    for r in stack.resources:
        if not r.custom or r.type in _SHARED_OR_AUTO_NAMED:
            continue
        assert r.type in _PHYSICAL_ID, f"{r.type}: which input names it in the project?"
        ids.add((r.type, repr([r.inputs.get(key) for key in _PHYSICAL_ID[r.type]])))
    return ids


def repo_copy(tmp_path: Path, stacks: dict[str, str], project: str | None = None) -> Path:
    """Pulumi.yaml, function/ (linked) and a copy of Pulumi.dev.yaml per stack name, keys under
    `project`."""
    text = (REPO_ROOT / "Pulumi.yaml").read_text(encoding="utf-8")
    dev = (FIXTURE_STACKS / "Pulumi.dev.yaml").read_text(encoding="utf-8")
    if project is not None:
        namespace = project_name()
        text = text.replace(f"name: {namespace}\n", f"name: {project}\n", 1)
        dev = dev.replace(f"{namespace}:", f"{project}:")
    (tmp_path / "Pulumi.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "function").symlink_to(REPO_ROOT / "function")
    for stack, source in stacks.items():
        content = (
            dev if source == "dev" else (REPO_ROOT / f"Pulumi.{source}.yaml").read_text(encoding="utf-8")
        )
        (tmp_path / f"Pulumi.{stack}.yaml").write_text(content, encoding="utf-8")
    return tmp_path


def test_two_stacks_with_the_same_config_share_no_physical_id(tmp_path: Path) -> None:
    root = repo_copy(tmp_path, {"dev": "dev", "staging": "dev"})
    dev, staging = (mock_stack(load_stack_settings(s, root=root)) for s in ("dev", "staging"))
    assert len(physical_ids(dev)) >= 20
    assert physical_ids(dev).isdisjoint(physical_ids(staging))


def test_thirty_character_stack_names_give_valid_distinct_names(tmp_path: Path) -> None:
    long_a, long_b = "a" * 29 + "1", "a" * 29 + "2"
    root = repo_copy(tmp_path, {long_a: "dev", long_b: "dev"})
    first, second = (mock_stack(load_stack_settings(s, root=root)) for s in (long_a, long_b))
    assert physical_ids(first).isdisjoint(physical_ids(second))
    for account in first.of_type(ACCOUNT):
        assert 6 <= len(account.inputs["accountId"]) <= 30
    for function in first.of_type(FUNCTION):
        assert len(function.inputs["name"]) <= 63
    assert 4 <= len(first.one(DATABASE).inputs["name"]) <= 63


def test_a_renamed_project_reads_its_config(tmp_path: Path) -> None:
    """A fork renames the project in Pulumi.yaml and moves its keys: the local tools follow."""
    root = repo_copy(tmp_path, {"dev": "dev"}, project="acme-nightly-jobs")
    settings = load_stack_settings("dev", root=root)
    assert settings.config_namespace == "acme-nightly-jobs"
    assert [job.name for job in settings.jobs] == [job.name for job in fixture_stack("dev").jobs]
    assert settings.max_instances == 3  # the stack file's value, not the project default 10
    # Keys left in the old namespace are not read: there is no job then.
    stale = tmp_path / "stale"
    stale.mkdir()
    shutil.copy(root / "Pulumi.yaml", stale / "Pulumi.yaml")
    shutil.copy(FIXTURE_STACKS / "Pulumi.dev.yaml", stale / "Pulumi.dev.yaml")
    with pytest.raises(SettingsError, match="acme-nightly-jobs:jobs: at least one job is required"):
        load_stack_settings("dev", root=stale)


# --- the database: the stack's own, a named one, or (default) -----------------------------------


def _database_targets(stack: MockedStack) -> tuple[set[str], set[str]]:
    fields = {r.inputs["database"] for r in stack.of_type(FIELD)}
    conditions = {
        r.inputs["condition"]["expression"]
        for r in stack.of_type(PROJECT_MEMBER)
        if r.inputs["role"] == "roles/datastore.user"
    }
    return fields, conditions


def test_the_default_database_is_used_as_it_is_and_never_created() -> None:
    settings = build(valid_values(databaseName="(default)", samples=True))
    assert settings.create_database is False
    stack = mock_stack(settings)
    assert stack.of_type(DATABASE) == []
    fields, conditions = _database_targets(stack)
    assert fields == {"(default)"}
    resource = f"projects/{settings.project}/databases/(default)"
    # The function's account and, with a sample that calls it, the token check's: each limited
    # to that database.
    assert conditions == {f'resource.name == "{resource}" || resource.name.startsWith("{resource}/")'}
    users = [r for r in stack.of_type(PROJECT_MEMBER) if r.inputs["role"] == "roles/datastore.user"]
    assert len(users) == (2 if needs_token_check(settings) else 1)
    assert stack.component_outputs["databaseName"] == "(default)"


def test_an_existing_named_database_is_adopted_with_create_database_false() -> None:
    stack = mock_stack(build(valid_values(databaseName="shared-ledger", createDatabase=False)))
    assert stack.of_type(DATABASE) == []
    fields, conditions = _database_targets(stack)
    assert fields == {"shared-ledger"} and all("/databases/shared-ledger" in c for c in conditions)


def test_a_named_database_is_created_by_default_and_default_never() -> None:
    assert build(valid_values(databaseName="my-ledger")).create_database is True
    with pytest.raises(SettingsError, match=r":createDatabase: the \(default\) database is never created"):
        build(valid_values(databaseName="(default)", createDatabase=True))
    with pytest.raises(SettingsError, match=r":createDatabase: expected boolean"):
        build(valid_values(createDatabase="yes"))


# --- a first deploy on a fresh project ---------------------------------------------------------


@pytest.fixture(scope="module")
def dev() -> MockedStack:
    return mock_stack(fixture_stack("dev"))


def test_first_deploy_apis_are_enabled(dev: MockedStack) -> None:
    enabled = {r.inputs["service"] for r in dev.of_type("gcp:projects/service:Service")}
    first_deploy = {
        "cloudbuild.googleapis.com",
        "artifactregistry.googleapis.com",
        "run.googleapis.com",
        "cloudfunctions.googleapis.com",
        "cloudscheduler.googleapis.com",
        "firestore.googleapis.com",
        "iam.googleapis.com",
        "logging.googleapis.com",
        "monitoring.googleapis.com",
        "cloudresourcemanager.googleapis.com",
    }
    # The dev stack has the samples: with the template's kinds, a sample workflow (the workflows,
    # and the API starting executions) and a sample BigQuery job. Nothing else.
    samples = {api for kind in TARGET_KINDS if kind.sample_job is not None for api in kind.apis}
    assert first_deploy | samples <= enabled == {*REQUIRED_APIS, *samples}


@needs_proxy_kinds
def test_the_token_check_runs_as_its_own_account_without_workflows_invoker(dev: MockedStack) -> None:
    runtime = {r.name: r.inputs["serviceConfig"]["serviceAccountEmail"] for r in dev.of_type(FUNCTION)}
    assert runtime["eos-token-check"] != runtime["eos-function"]
    holders = {
        r.inputs["member"].removeprefix("serviceAccount:")
        for r in dev.of_type(PROJECT_MEMBER)
        if r.inputs["role"] == "roles/workflows.invoker"
    }
    assert holders == {runtime["eos-function"]}


def _named(stack: MockedStack, type_: str, name: str) -> MockedResource:
    return next(r for r in stack.of_type(type_) if r.name == name)


def test_scheduler_jobs_fire_only_after_the_serving_grants_propagated(dev: MockedStack) -> None:
    sleep = _named(dev, SLEEP, "eos-serving-grants-propagation")
    assert sleep.inputs["createDuration"] == "60s"
    waited: list[Any] = dev.dependencies[sleep.urn]
    grants = [
        r.urn
        for r in dev.resources
        if r.type
        in (
            PROJECT_MEMBER,
            "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
            "gcp:bigquery/datasetIamMember:DatasetIamMember",
        )
        and "builder" not in r.name
    ]
    # Firestore and run.invoker for the runtime and invoker accounts; with the template's kinds
    # Firestore for the token check's account and run.invoker for the sample workflow's on it,
    # the project roles (workflows.invoker, the sample BigQuery job's jobUser) and the dataset
    # grant: 7.
    settings = fixture_stack("dev")
    expected = (
        2 + 2 * needs_token_check(settings) + len(project_roles(settings)) + len(runtime_grants(settings))
    )
    assert len(grants) == expected and set(grants) <= set(waited)
    for job in dev.of_type(JOB):
        assert sleep.urn in dev.dependencies[job.urn]


def test_the_deployed_job_id_is_the_one_the_settings_give_the_tools(dev: MockedStack) -> None:
    settings = with_audit_job(fixture_stack("dev"))
    deployed = {r.name.removeprefix("eos-job-"): r.inputs["name"] for r in dev.of_type(JOB)}
    assert deployed == {job.name: settings.scheduler_job_id(job.name) for job in settings.jobs}


# --- overlap policy and alert channels: config keys -------------------------------------------


def test_overlap_policies_reach_the_function_by_deployed_job_id() -> None:
    settings = build(
        valid_values(
            jobs=[
                valid_job(name="a", overlap="skip"),
                valid_job(name="b", overlap="wait"),
                valid_job(name="c"),
            ]
        )
    )
    table = shipped_table(mock_stack(settings).resources)
    assert {job: policy.overlap.value for job, policy in table.jobs.items() if policy.overlap != "allow"} == {
        "eos-prod_a": "skip",
        "eos-prod_b": "wait",
        "eos-prod_missed-run-audit": "wait",  # two audit runs never judge at once
    }
    allowing = job_table(build(valid_values(jobs=[valid_job(overlap="allow")])))
    assert all(policy.overlap == "allow" for policy in allowing.jobs.values())


def test_an_unknown_overlap_policy_names_the_key() -> None:
    with pytest.raises(SettingsError, match=r":jobs\[0\]\.overlap: 'forbid' is not one of allow, skip, wait"):
        build(valid_values(jobs=[valid_job(overlap="forbid")]))


def test_wait_warns_when_retries_cannot_outlast_the_earlier_run() -> None:
    """The stack's mandatory timing rules already make a retry arrive after the lease, so a
    deployable `wait` job never triggers these; the advisory speaks for timings that bypass
    them (settings built by hand, the policy pack's view of an edited stack)."""
    settings = build(valid_values(jobs=[valid_job(overlap="wait")]))
    assert timing_advisories(settings) == []
    no_retries = dataclasses.replace(settings.jobs[0].retry, retry_count=0)
    job = dataclasses.replace(settings.jobs[0], retry=no_retries)
    rules = [v.rule for v in advisories.check_wait_overlap(settings.job_timing(job))]
    assert rules == ["overlap-wait-window"]
    hand_built = dataclasses.replace(settings, jobs=(job,))
    (advisory,) = [a for a in timing_advisories(hand_built) if "overlap 'wait'" in a]
    assert ":jobs[0].retry.retryCount" in advisory and "no retry" in advisory
    every_minute = dataclasses.replace(settings.jobs[0], schedule="* * * * *")
    rules = [v.rule for v in advisories.check_wait_overlap(settings.job_timing(every_minute))]
    assert "overlap-wait-backlog" in rules


def test_alert_notification_channels_are_validated_and_exposed() -> None:
    channel = "projects/acme-prod/notificationChannels/123"
    assert build(valid_values(alertNotificationChannels=[channel])).alert_notification_channels == (channel,)
    with pytest.raises(SettingsError, match=r":alertNotificationChannels\[1\]: '42' is not a notification"):
        build(valid_values(alertNotificationChannels=[channel, "42"]))
    with pytest.raises(SettingsError, match=r":alertNotificationChannels: expected array"):
        build(valid_values(alertNotificationChannels=channel))
