"""What a first `pulumi up` waits for, in the recorded dependency graph, applied and in preview.

Cloud Monitoring refuses an alert policy on a log-based metric it does not know yet (404,
"could take up to 10 minutes to become available"), and IAM applies a grant minutes after
the call that made it returned. The pauses sit between the two in every dependency chain.
"""

from __future__ import annotations

import pytest

from infra.component import REQUIRED_APIS
from infra.monitoring import log_filters
from infra.monitoring.alerts import ALERTS
from infra.monitoring.log_filters import metric_id
from infra.plan.needs import extra_apis, needs_token_check
from infra.resources.propagation import (
    API_ACTIVATION_DELAY_SECONDS,
    BUILD_GRANTS_DELAY_SECONDS,
    METRIC_TYPES_DELAY_SECONDS,
    PAUSES,
    SECRET_GRANTS_DELAY_SECONDS,
    SERVING_GRANTS_DELAY_SECONDS,
)
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from tests.infra.conftest import build, valid_job, valid_values
from tools.mocked_program import SLEEP, MockedResource, MockedStack, mock_stack, pause_seconds

METRIC = "gcp:logging/metric:Metric"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
BUILDER_GRANT_NAMES = ("eos-builder-log-writer", "eos-builder-images-writer", "eos-builder-sources-viewer")
SECRET_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"
# A job of its own and every sample: with the template's target kinds, a sample workflow (and so
# the token check, a second function) and a sample BigQuery job bring their accounts and APIs.
VALUES = valid_values(samples=True)
SECRETS_PAUSE = "eos-runtime-grants-propagation"


def metric_types_pause(stack: MockedStack, stack_name: str) -> MockedResource:
    return stack.named(SLEEP, f"eos-{stack_name}-ops-metric-types-propagation")


def referenced_metric(stack: MockedStack, policy: MockedResource) -> MockedResource:
    series = policy.inputs["conditions"][0]["conditionThreshold"]["filter"]
    (metric,) = [m for m in stack.of_type(METRIC) if f'/user/{m.inputs["name"]}"' in series]
    return metric


@pytest.fixture(scope="module", params=[False, True], ids=["applied", "preview"])
def prod(request: pytest.FixtureRequest) -> MockedStack:
    return mock_stack(build(VALUES), preview=request.param)


def test_every_alert_policy_waits_for_a_pause_after_the_metric_it_references(prod: MockedStack) -> None:
    pause = metric_types_pause(prod, "prod")
    assert pause_seconds(pause) == METRIC_TYPES_DELAY_SECONDS >= 150
    metrics = prod.of_type(METRIC)
    assert len(metrics) == len(log_filters.METRICS)
    assert {m.urn for m in metrics} <= set(prod.dependencies[pause.urn])
    policies = prod.of_type(ALERT)
    assert len(policies) == len(ALERTS)
    for policy in policies:
        assert pause.urn in prod.dependencies[policy.urn]
        assert pause in prod.pauses_before(policy.urn, at_least=150)
        assert referenced_metric(prod, policy).urn in prod.waits_for(pause.urn)


def test_the_pause_is_triggered_by_the_metrics_names(prod: MockedStack) -> None:
    """A renamed metric is a new metric: the changed trigger replaces the pause, which sleeps
    again before the policies are updated to the new type."""
    pause = metric_types_pause(prod, "prod")
    assert pause.inputs["triggers"] == {
        metric.suffix: metric_id("eos-prod-ops", metric) for metric in log_filters.METRICS
    }


def test_every_function_builds_after_a_pause_that_follows_the_builders_grants(prod: MockedStack) -> None:
    grants = {r.urn for r in prod.resources if r.name in BUILDER_GRANT_NAMES}
    assert len(grants) == 3
    for function in prod.of_type(FUNCTION):
        pauses = prod.pauses_before(function.urn, at_least=BUILD_GRANTS_DELAY_SECONDS)
        assert [p.name for p in pauses] == ["eos-build-grants-propagation"]
        assert grants <= prod.waits_for(pauses[0].urn)


def test_a_second_stack_in_the_project_waits_for_its_own_metrics() -> None:
    """Its metrics are new metrics (their ids carry the stack), so its policies meet the same
    404 on its first `pulumi up`: each stack has its own pause, triggered by its own metrics."""
    stacks = {name: mock_stack(build(VALUES, stack=name)) for name in ("prod", "staging")}
    triggers = []
    for name, stack in stacks.items():
        pause = metric_types_pause(stack, name)
        triggers.append(set(pause.inputs["triggers"].values()))
        for policy in stack.of_type(ALERT):
            assert pause in stack.pauses_before(policy.urn, at_least=150)
            assert referenced_metric(stack, policy).inputs["name"] in pause.inputs["triggers"].values()
    assert triggers[0].isdisjoint(triggers[1])


def test_a_stack_brought_up_again_after_destroy_pauses_again(prod: MockedStack) -> None:
    """`pulumi destroy` deletes the metrics, and the next `pulumi up` creates them anew: the
    pauses are ordinary resources of the stack (neither protected nor retained), so destroy
    removes them too and the next up creates, and so sleeps, them again."""
    pauses = prod.of_type(SLEEP)
    assert {p.name for p in pauses} == {
        "eos-api-propagation",
        "eos-build-grants-propagation",
        "eos-serving-grants-propagation",
        "eos-prod-ops-metric-types-propagation",
    }
    assert not [p.name for p in pauses if p.protect or p.retain_on_delete]
    # Nothing else of the stack is retained but the field settings of the database that
    # deletion protection keeps: destroy leaves no metric behind to clash.
    assert {r.type for r in prod.resources if r.retain_on_delete} == {"gcp:firestore/field:Field"}


def with_secrets(secrets: dict[str, str], preview: bool = False) -> MockedStack:
    return mock_stack(
        build({**VALUES, "jobs": [valid_job(), valid_job(name="report", secrets=secrets)]}), preview=preview
    )


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_a_function_with_secrets_deploys_after_a_build_length_pause_that_follows_the_secret_grants(
    preview: bool,
) -> None:
    """Cloud Run checks the runtime account's access to each secret when it deploys the
    revision, and a failed check fails the update: no Scheduler retry covers it, so the pause
    is as long as the build's, not the serving grants' shorter one."""
    stack = with_secrets({"DB_PASSWORD": "db-password", "API_KEY": "api-key"}, preview)
    pause = stack.named(SLEEP, SECRETS_PAUSE)
    assert pause_seconds(pause) == SECRET_GRANTS_DELAY_SECONDS >= BUILD_GRANTS_DELAY_SECONDS
    assert SECRET_GRANTS_DELAY_SECONDS > SERVING_GRANTS_DELAY_SECONDS
    grants = stack.of_type(SECRET_MEMBER)
    assert len(grants) == 2 and {g.urn for g in grants} <= set(stack.dependencies[pause.urn])
    (function,) = [f for f in stack.of_type(FUNCTION) if f.inputs["name"].endswith("-handler")]
    assert pause.urn in stack.dependencies[function.urn]
    assert {g.urn for g in grants} <= stack.waits_for(function.urn)


def test_a_secret_added_later_sleeps_again() -> None:
    """The pause's triggers name the secrets: a new secret is a new grant, and a changed
    trigger replaces the pause, which sleeps before the function is updated."""
    one = with_secrets({"DB_PASSWORD": "db-password"}).named(SLEEP, SECRETS_PAUSE)
    two = with_secrets({"DB_PASSWORD": "db-password", "API_KEY": "api-key"}).named(SLEEP, SECRETS_PAUSE)
    assert one.inputs["triggers"]["runtime"] == two.inputs["triggers"]["runtime"]
    assert one.inputs["triggers"]["secrets"] != two.inputs["triggers"]["secrets"]
    assert "api-key" in two.inputs["triggers"]["secrets"]


def test_no_secrets_no_secrets_pause(prod: MockedStack) -> None:
    assert SECRETS_PAUSE not in {p.name for p in prod.of_type(SLEEP)}


def test_the_stacks_pauses_are_the_registered_ones(prod: MockedStack) -> None:
    """The docs count PAUSES: every stack has those not tied to secrets, one with secrets all."""

    def registered(stack: MockedStack) -> list[str]:
        return sorted(
            next(pause.suffix for pause in PAUSES if sleep.name.endswith(f"-{pause.suffix}"))
            for sleep in stack.of_type(SLEEP)
        )

    assert registered(prod) == sorted(pause.suffix for pause in PAUSES if not pause.only_with_secrets)
    assert registered(with_secrets({"DB_PASSWORD": "db-password"})) == sorted(
        pause.suffix for pause in PAUSES
    )


# --- the pause after the enabled APIs -----------------------------------------------------------

SERVICE = "gcp:projects/service:Service"
API_PAUSE = "eos-api-propagation"
# The APIs that are off in a new project and whose first calls can answer 403 for a while.
LATE_API_TYPES = ("gcp:firestore/", "gcp:artifactregistry/", "gcp:serviceaccount/")


def test_every_firestore_registry_and_iam_resource_waits_for_a_pause_after_every_enabled_api(
    prod: MockedStack,
) -> None:
    pause = prod.named(SLEEP, API_PAUSE)
    assert pause_seconds(pause) == API_ACTIVATION_DELAY_SECONDS >= 60
    services = prod.of_type(SERVICE)
    settings = build(VALUES)
    assert len(services) == len(set(REQUIRED_APIS) | set(extra_apis(settings)))
    assert {s.urn for s in services} <= set(prod.dependencies[pause.urn])
    users = [r for r in prod.resources if r.type.startswith(LATE_API_TYPES)]
    # The database and its 5 field settings, the image repository and its grant, the runtime,
    # invoker and builder accounts; with a sample that calls the token check, its account and
    # the tokens' TTL too, and the accounts the samples run as (the sample workflow's).
    assert len(users) >= (13 if needs_token_check(settings) else 11)
    assert {r.type.split("/")[0] for r in users} == {
        "gcp:firestore",
        "gcp:artifactregistry",
        "gcp:serviceaccount",
    }
    assert [r.name for r in users if pause.urn not in prod.waits_for(r.urn)] == []


def test_the_api_pause_is_triggered_by_the_list_of_apis() -> None:
    """A job that brings an API (Workflows, BigQuery, Secret Manager) changes the list: the
    pause sleeps again before what the update creates."""
    plain = mock_stack(build(valid_values(jobs=[valid_job()]))).named(SLEEP, API_PAUSE)
    assert plain.inputs["triggers"]["apis"] == " ".join(sorted(REQUIRED_APIS))
    # Every sample (the kinds' APIs, where the kinds are present) and a secret (Secret Manager's).
    values = {**VALUES, "jobs": [valid_job(), valid_job(name="report", secrets={"API_KEY": "api-key"})]}
    brought = set(extra_apis(build(values)))
    assert "secretmanager.googleapis.com" in brought
    assert {api for kind in TARGET_KINDS if kind.sample_job is not None for api in kind.apis} <= brought
    shown = mock_stack(build(values)).named(SLEEP, API_PAUSE).inputs["triggers"]["apis"].split()
    assert shown == sorted(shown) and set(shown) == set(REQUIRED_APIS) | brought
    assert not brought & set(plain.inputs["triggers"]["apis"].split())
