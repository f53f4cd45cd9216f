"""docs/deploy.md and docs/stack.md state what the code does: the roles table, the names, the
keys, and the pauses and monitoring resources the stack declares, counted and timed."""

from __future__ import annotations

import re

from infra.component import REQUIRED_APIS
from infra.config.schema import REPO_ROOT
from infra.monitoring import log_filters
from infra.monitoring.alerts import ALERTS
from infra.resources.propagation import (
    API_ACTIVATION_DELAY_SECONDS,
    BUILD_GRANTS_DELAY_SECONDS,
    METRIC_TYPES_DELAY_SECONDS,
    SECRET_GRANTS_DELAY_SECONDS,
    SERVING_GRANTS_DELAY_SECONDS,
)
from policy.scheduler_guardrails.rules.config.deployer_roles import (
    DEPLOYER_ROLES,
    deployer_roles_table,
    grant_kind_roles_table,
)
from policy.scheduler_guardrails.rules.config.names import StackNames
from tests.infra.conftest import build, valid_job, valid_values
from tests.support.optional import needs_proxy_kinds
from tests.support.stacks import fixture_stack
from tools.mocked_program import SLEEP, mock_stack, pause_seconds

DOC = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")


def test_the_roles_table_is_deployer_roles() -> None:
    table = re.search(r"<!-- deployer-roles:start -->\n(.*?)\n<!-- deployer-roles:end -->", DOC, re.S)
    assert table is not None and table.group(1) == deployer_roles_table()
    assert all(f"`{role.role}`" in table.group(1) for role in DEPLOYER_ROLES)


def test_the_job_grant_roles_table_is_grant_kind_roles() -> None:
    table = re.search(
        r"<!-- deployer-grant-roles:start -->\n(.*?)\n<!-- deployer-grant-roles:end -->", DOC, re.S
    )
    assert table is not None and table.group(1) == grant_kind_roles_table()


def test_the_failed_build_repair_and_the_region_change_are_documented() -> None:
    shown = " ".join(DOC.split())
    assert "pulumi up --policy-pack policy --replace 'urn:pulumi:dev::" in shown
    assert "pulumi stack --show-urns" in shown
    assert "gcloud functions delete eos-dev-handler --gen2" in shown
    assert "## What only a real project can confirm" in DOC
    confirm = shown.split("What only a real project can confirm", 1)[1]
    assert "pulumi up --replace <urn>" in confirm and "self-reference" in confirm


def test_the_names_shown_are_the_dev_stacks() -> None:
    names = StackNames("dev")
    shown = [
        *(
            names.service_account_id(role)
            for role in ("runtime", "invoker", "builder", "tokens", "workflow", "crjob")
        ),
        names.cloud_run_job_name("nightly-export"),
        names.sample_dataset_id(),
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


# The dev stack's jobs go through the proxy kinds: without them it is refused, as it should be.
@needs_proxy_kinds
def test_the_database_shown_is_the_dev_stacks() -> None:
    assert fixture_stack("dev").database_name == StackNames("dev").database_id()


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


# --- the pauses and the monitoring resources: counts and lengths from the code -------------------


def _shown(text: str) -> str:
    """`text` as Markdown shows it: without comments, so a generated figure reads as its value."""
    return re.sub(r"<!--.*?-->", "", text)


STACK_DOC = _shown((REPO_ROOT / "docs" / "stack.md").read_text(encoding="utf-8"))


def _pauses(secrets: bool) -> dict[str, int]:
    """The mocked stack's pauses as deploy.md names them (`<prefix>` for the stack's own)."""
    job = valid_job(name="report", secrets={"DB_PASSWORD": "db-password"}) if secrets else valid_job()
    settings = build(valid_values(jobs=[job]))
    stack = mock_stack(settings)
    prefix = settings.names.monitoring_prefix().removesuffix("-ops")
    return {
        pause.name.replace(f"{prefix}-", "<prefix>-"): pause_seconds(pause) for pause in stack.of_type(SLEEP)
    }


def _counted(resource: str) -> tuple[int, str]:
    """The count stack.md's resources table gives `resource` (its row reads "`<type>`",
    a multiplication sign, the count), and the row."""
    prefix = f"| `{resource}` \N{MULTIPLICATION SIGN} "
    (row,) = [line for line in STACK_DOC.splitlines() if line.startswith(prefix)]
    return int(row.removeprefix(prefix).split()[0]), row


def test_the_pauses_table_is_the_stacks_pauses_with_their_lengths() -> None:
    shown = dict(re.findall(r"^\| `([^`]+-propagation)` \| (\d+) s \|", DOC, re.MULTILINE))
    every = _pauses(secrets=True)
    assert {name: int(seconds) for name, seconds in shown.items()} == every
    without = _pauses(secrets=False)
    assert f"{len(without)} in every stack, {len(every)} when a job has `secrets`" in " ".join(
        _shown(DOC).split()
    )
    assert set(every) - set(without) == {"eos-runtime-grants-propagation"}
    assert f"the {len(log_filters.METRICS)} log-based metrics" in _shown(DOC)
    assert f'minutes"; {METRIC_TYPES_DELAY_SECONDS} s is a bet on the usual case' in DOC


def test_what_a_real_project_must_confirm_names_the_lengths_the_code_waits() -> None:
    confirm = DOC.split("## What only a real project can confirm", 1)[1]
    for phrase in (
        f"That {API_ACTIVATION_DELAY_SECONDS} s after the APIs are enabled",
        f"That {BUILD_GRANTS_DELAY_SECONDS} s is enough for the build account's grants",
        f"that {SERVING_GRANTS_DELAY_SECONDS} s before the first scheduled run",
        f"within the {METRIC_TYPES_DELAY_SECONDS} s pause",
        f"that {SECRET_GRANTS_DELAY_SECONDS} s after the `secretAccessor` grants",
    ):
        assert phrase in " ".join(confirm.split()), phrase


def test_the_stack_pages_counts_are_the_stacks() -> None:
    without, every = _pauses(secrets=False), _pauses(secrets=True)
    sleeps, row = _counted("time.Sleep")
    assert sleeps == len(without) and f" {sleeps} ({len(every)} when a job has secrets) |" in row
    assert sorted(int(n) for n in re.findall(r"(\d+) s after", row)) == sorted(every.values())
    assert _counted("gcp.logging.Metric")[0] == len(log_filters.METRICS)
    assert _counted("gcp.projects.Service")[0] == len(REQUIRED_APIS)
    alerts, row = _counted("gcp.monitoring.AlertPolicy")
    assert alerts == len(ALERTS)
    assert [alert.key for alert in ALERTS if f"`{alert.key}`" not in row] == []
    assert f"plus {BUILD_GRANTS_DELAY_SECONDS} s of IAM propagation" in STACK_DOC
    assert f"the function is deployed {SECRET_GRANTS_DELAY_SECONDS} s after these grants" in STACK_DOC
