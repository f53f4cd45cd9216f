"""docs/deploy.md states what the code does: the roles table, the names, the keys."""

from __future__ import annotations

import re

from infra.deployer_roles import DEPLOYER_ROLES, deployer_roles_table
from infra.names import StackNames
from infra.settings import REPO_ROOT, load_stack_settings
from infra.stack import REQUIRED_APIS

DOC = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")


def test_the_roles_table_is_deployer_roles() -> None:
    table = re.search(r"<!-- deployer-roles:start -->\n(.*?)\n<!-- deployer-roles:end -->", DOC, re.S)
    assert table is not None and table.group(1) == deployer_roles_table()
    assert all(f"`{role.role}`" in table.group(1) for role in DEPLOYER_ROLES)


def test_the_names_shown_are_the_dev_stacks() -> None:
    names = StackNames("dev")
    shown = [
        *(names.service_account_id(role) for role in ("runtime", "invoker", "builder", "tokens", "workflow")),
        names.function_name("handler"),
        names.function_name("token-check"),
        names.scheduler_job_id("nightly-report"),
        names.repository_id(),
        names.workflow_name("workflow-proxy-demo"),
        names.database_id(),
        names.display_name("function runtime"),
        f"{names.monitoring_prefix()}-deliveries",
        StackNames("a" * 29 + "b").service_account_id("runtime"),
    ]
    assert all(f"`{name}`" in DOC for name in shown), [n for n in shown if f"`{n}`" not in DOC]
    assert load_stack_settings("dev").database_name == names.database_id()


def test_every_required_api_is_named() -> None:
    products = {
        "artifactregistry": "Artifact Registry",
        "cloudbuild": "Cloud Build",
        "cloudfunctions": "Cloud Functions",
        "cloudresourcemanager": "Cloud Resource Manager",
        "cloudscheduler": "Cloud Scheduler",
        "firestore": "Firestore",
        "iam": "IAM",
        "logging": "Cloud Logging",
        "monitoring": "Cloud Monitoring",
        "run": "Cloud Run",
        "storage": "Cloud Storage",
    }
    assert {api.split(".")[0] for api in REQUIRED_APIS} == set(products)
    assert all(product in DOC for product in products.values())


def test_the_import_command_and_keys_are_documented() -> None:
    assert "pulumi import gcp:firestore/database:Database eos-database" in DOC
    assert "projects/{{project}}/databases/{{name}}" in DOC
    keys = (
        "databaseName",
        "createDatabase",
        "deletionProtection",
        "alertNotificationChannels",
        "jobs[].overlap",
    )
    assert all(f"`{key}" in DOC for key in keys)
