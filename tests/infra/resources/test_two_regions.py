"""A stack with `secondRegion`: every job, the function and the grants they use in both regions,
every delivery naming the primary region as its location (one run id from either region), and
the ledger in a multi-region location; one mocked program run, shared by every test here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from exactly_once.audit.config import REGION_ENV, AuditConfig, Redelivery
from exactly_once.delivery.outcomes import Outcome
from exactly_once.delivery.scheduler_request import LOCATION_HEADER, PROJECT_HEADER
from infra.monitoring.alerts import ALERTS
from infra.monitoring.log_filters import DELIVERIES, log_entry
from infra.plan.audit_job import with_audit_job
from infra.plan.catchup import FUNCTION_ROLE, function_url, queue_path
from infra.resources.build import sources_bucket
from infra.resources.regions import regional_prefix
from infra.settings.environment import function_environment, stack_environment
from infra.settings.stack import StackSettings
from infra.settings.timing_checks import timing_advisories
from policy.scheduler_guardrails.rules.config.grants import CATCHUP_ENQUEUER
from tests.infra.conftest import PROJECT, REGION, build, error_of, valid_job, valid_values
from tests.support.stack_tables import shipped_table
from tools.mocked_program import PROJECT_NUMBER, MockedResource, MockedStack, mock_stack

SECOND = "europe-west4"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
SCHEDULER_JOB = "gcp:cloudscheduler/job:Job"
RUN_INVOKER = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
REPOSITORY = "gcp:artifactregistry/repository:Repository"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
DATABASE = "gcp:firestore/database:Database"
QUEUE = "gcp:cloudtasks/queue:Queue"
QUEUE_MEMBER = "gcp:cloudtasks/queueIamMember:QueueIamMember"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
LOG_METRIC = "gcp:logging/metric:Metric"
ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"


def two_region_values(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"secondRegion": SECOND, "databaseLocation": "eur3"}
    values.update(overrides)
    return valid_values(**values)


@pytest.fixture(scope="module")
def settings() -> StackSettings:
    return build(
        two_region_values(
            jobs=[
                valid_job(),
                valid_job(name="nightly", schedule="0 3 * * *", body={"day": 1}),
                valid_job(name="catching-up", schedule="0 * * * *", catchup={"windowSeconds": 86400}),
            ]
        )
    )


@pytest.fixture(scope="module")
def stack(settings: StackSettings) -> MockedStack:
    return mock_stack(settings)


def test_adding_the_second_region_keeps_every_urn_of_the_first(
    stack: MockedStack, settings: StackSettings
) -> None:
    one_region = mock_stack(dataclasses.replace(settings, second_region=""))
    first = {r.urn for r in one_region.resources}
    both = {r.urn for r in stack.resources}
    assert first <= both
    added = sorted(both - first)
    # What the second region adds, and nothing else: each carries the region in its name.
    assert added and all(f"::eos-{SECOND}-" in urn for urn in added), added
    assert len([urn for urn in added if SCHEDULER_JOB in urn]) == len(with_audit_job(settings).jobs)


def _by_region(stack: MockedStack, type_: str, key: str = "location") -> dict[str, list[MockedResource]]:
    found: dict[str, list[MockedResource]] = {}
    for resource in stack.of_type(type_):
        found.setdefault(resource.inputs[key], []).append(resource)
    return found


def test_the_settings_name_both_regions_and_the_ledgers_location(settings: StackSettings) -> None:
    assert settings.regions == (REGION, SECOND)
    assert settings.run_location == REGION
    assert settings.ledger_location == "eur3"


def test_one_function_per_region_with_the_same_name_source_account_and_environment(
    stack: MockedStack, settings: StackSettings
) -> None:
    functions = _by_region(stack, FUNCTION)
    assert sorted(functions) == sorted([REGION, SECOND])
    first, second = functions[REGION], functions[SECOND]
    assert [len(first), len(second)] == [1, 1]
    assert first[0].name == "eos-function" and second[0].name == f"eos-{SECOND}-function"
    # The same name in both: each reports the same service (K_SERVICE) as the runs' target.
    assert first[0].inputs["name"] == second[0].inputs["name"] == settings.names.function_name(FUNCTION_ROLE)
    one, other = first[0].inputs, second[0].inputs
    assert one["buildConfig"]["source"] == other["buildConfig"]["source"]
    assert one["buildConfig"]["serviceAccount"] == other["buildConfig"]["serviceAccount"]
    for key in ("serviceAccountEmail", "timeoutSeconds", "ingressSettings"):
        assert one["serviceConfig"][key] == other["serviceConfig"][key], key
    # The same environment but for the region each names, which picks its catch-up queue.
    one_env = dict(one["serviceConfig"]["environmentVariables"])
    other_env = dict(other["serviceConfig"]["environmentVariables"])
    assert (one_env.pop(REGION_ENV), other_env.pop(REGION_ENV)) == (REGION, SECOND)
    assert one_env == other_env
    # Each builds into its own region's repository, which the builder may push to.
    for region, [function] in functions.items():
        assert f"/locations/{region}/repositories/" in function.inputs["buildConfig"]["dockerRepository"]
    repositories = _by_region(stack, REPOSITORY)
    assert sorted(repositories) == sorted([REGION, SECOND])
    assert {r.inputs["repositoryId"] for rs in repositories.values() for r in rs} == {
        settings.names.repository_id()
    }


def test_the_builder_may_read_the_sources_of_both_regions(stack: MockedStack) -> None:
    viewers = [r for r in stack.of_type(PROJECT_MEMBER) if r.inputs["role"] == "roles/storage.objectViewer"]
    expressions = sorted(r.inputs["condition"]["expression"] for r in viewers)
    assert len(expressions) == 2
    for region in (REGION, SECOND):
        bucket = sources_bucket(PROJECT_NUMBER, region)
        assert sum(f'"projects/_/buckets/{bucket}"' in e for e in expressions) == 1, region


def test_every_job_in_both_regions_calls_its_own_regions_function(
    stack: MockedStack, settings: StackSettings
) -> None:
    deployed = with_audit_job(settings)
    job_ids = sorted(deployed.scheduler_job_id(job) for job in deployed.jobs)
    jobs = _by_region(stack, SCHEDULER_JOB, key="region")
    assert sorted(jobs) == sorted([REGION, SECOND])
    functions = {region: rs[0].urn for region, rs in _by_region(stack, FUNCTION).items()}
    for region, regional in jobs.items():
        # The same ids (the audit job's among them): Cloud Scheduler sends the id as the job name.
        assert sorted(job.inputs["name"] for job in regional) == job_ids, region
        other = next(r for r in functions if r != region)
        for job in regional:
            assert job.name.startswith(f"{regional_prefix('eos', settings, region)}-job-"), job.name
            # Its URI and audience come from its own region's function, and only from it.
            direct = set(stack.dependencies[job.urn])
            assert functions[region] in direct and functions[other] not in direct, job.name


def test_both_regions_deliveries_carry_the_primary_region_as_their_location(stack: MockedStack) -> None:
    jobs = _by_region(stack, SCHEDULER_JOB, key="region")
    first = {job.inputs["name"]: job.inputs for job in jobs[REGION]}
    for job in jobs[SECOND]:
        target = job.inputs["httpTarget"]
        assert target["headers"][LOCATION_HEADER] == REGION
        assert target["headers"][PROJECT_HEADER] == PROJECT
        twin = first[job.inputs["name"]]
        assert target["headers"] == twin["httpTarget"]["headers"]
        assert target.get("body") == twin["httpTarget"].get("body")
        for key in ("schedule", "timeZone", "attemptDeadline", "retryConfig", "paused"):
            assert job.inputs[key] == twin[key], key


def test_the_invoker_may_call_each_regions_function(stack: MockedStack) -> None:
    grants = {
        r.inputs["location"]: r.inputs["name"]
        for r in stack.of_type(RUN_INVOKER)
        if r.inputs["role"] == "roles/run.invoker"
    }
    services = {
        function.inputs["location"]: function.outputs["serviceConfig"]["service"]
        for function in stack.of_type(FUNCTION)
    }
    assert grants == services


def test_the_ledger_is_created_in_the_multi_region_location(stack: MockedStack) -> None:
    assert stack.one(DATABASE).inputs["locationId"] == "eur3"


def test_a_catchup_queue_in_each_region_the_runtime_may_add_tasks_to(
    stack: MockedStack, settings: StackSettings
) -> None:
    queues = _by_region(stack, QUEUE)
    assert sorted(queues) == sorted([REGION, SECOND])
    names = [queues[REGION][0].name, queues[SECOND][0].name]
    assert names == ["eos-catchup-queue", f"eos-{SECOND}-catchup-queue"]
    # Queue names are unique per location: both are named after when they were created.
    assert [q.inputs["name"].rsplit("-", 1)[0] for q in (queues[REGION][0], queues[SECOND][0])] == [
        f"eos-{settings.stack}-catchup"
    ] * 2
    assert queues[REGION][0].inputs["retryConfig"] == queues[SECOND][0].inputs["retryConfig"]
    (act_as,) = stack.of_type(ACCOUNT_MEMBER)  # acting as the invoker: one grant, on the account
    enqueuers = _by_region(stack, QUEUE_MEMBER)
    assert sorted(enqueuers) == sorted([REGION, SECOND])
    for region, [enqueuer] in enqueuers.items():
        assert (enqueuer.inputs["role"], enqueuer.inputs["member"]) == (
            CATCHUP_ENQUEUER.role,
            act_as.inputs["member"],
        )
        assert enqueuer.inputs["name"] == queues[region][0].outputs["name"]


def test_each_regions_function_catches_up_through_its_own_queue_to_itself(
    stack: MockedStack, settings: StackSettings
) -> None:
    # Both functions ship one table (one source), which names each region's queue and URL...
    tables = [shipped_table(stack.resources, name) for name in ("function", f"{SECOND}-function")]
    assert tables[0] == tables[1] and tables[0].audit is not None
    config = AuditConfig.from_raw(tables[0].audit)
    invoker = next(r for r in stack.of_type(ACCOUNT) if r.name.endswith("-invoker")).outputs["email"]
    queues = {
        region: queue_path(settings, queue.outputs["name"], region)
        for region, [queue] in _by_region(stack, QUEUE).items()
    }
    assert config.redeliveries == tuple(
        Redelivery(function_url(settings, region), queues[region], invoker, region)
        for region in (REGION, SECOND)
    )
    assert queues[SECOND].startswith(f"projects/{PROJECT}/locations/{SECOND}/queues/eos-")
    assert function_url(settings, SECOND).startswith(f"https://{SECOND}-{PROJECT}.cloudfunctions.net/")
    # ...and each function's environment names its region, which picks its own.
    for function in stack.of_type(FUNCTION):
        region = function.inputs["location"]
        chosen = config.redelivery_for(function.inputs["serviceConfig"]["environmentVariables"][REGION_ENV])
        assert chosen is not None and (chosen.region, chosen.queue) == (region, queues[region])


def test_only_a_two_region_stack_names_its_functions_region(settings: StackSettings) -> None:
    one_region = dataclasses.replace(settings, second_region="")
    assert REGION_ENV not in function_environment(one_region)
    assert REGION_ENV not in function_environment(one_region, REGION)
    assert function_environment(settings, SECOND)[REGION_ENV] == SECOND
    # The size check counts the longer of the two names, whichever region that is.
    for first, second in (("us-central1", "europe-north1"), ("europe-north1", "us-central1")):
        other = dataclasses.replace(settings, region=first, second_region=second)
        assert stack_environment(other)[REGION_ENV] == "europe-north1"


def test_one_set_of_monitoring(stack: MockedStack) -> None:
    # The metrics filter on the service name both regions' functions share: they count both.
    service = stack.of_type(FUNCTION)[0].inputs["name"]
    deliveries = next(m for m in stack.of_type(LOG_METRIC) if m.name.endswith(DELIVERIES.suffix))
    assert f'resource.labels.service_name="{service}"' in deliveries.inputs["filter"]
    assert len(stack.of_type(ALERT_POLICY)) == len(ALERTS)


def test_a_duplicate_deliverys_answers_are_counted_but_alert_nobody() -> None:
    alerted = {alert.outcome for alert in ALERTS}
    for outcome in (Outcome.IN_PROGRESS, Outcome.DUPLICATE_COMPLETED):
        assert outcome not in alerted
        line = {"outcome": outcome.value, "job": "eos-prod_every-5"}
        assert DELIVERIES.matches(log_entry(line, "eos-prod-handler"), "eos-prod-handler")


def test_retries_that_end_before_the_time_limit_and_lease_are_advised_against() -> None:
    short = valid_job(retry={"retryCount": 2, "minBackoffSeconds": 20, "maxBackoffSeconds": 300})
    two = build(two_region_values(jobs=[short]))
    advisories = [a for a in timing_advisories(two) if "second region" in a]
    assert len(advisories) == 1
    assert "jobs[0].retry.retryCount" in advisories[0] and "job 'every-5'" in advisories[0]
    # 55 s time limit + 30 s lease; the retries come 20 s and 60 s after the first attempt.
    assert "(85s)" in advisories[0] and "arrives 60s after" in advisories[0]
    assert not [a for a in timing_advisories(build(valid_values(jobs=[short]))) if "second region" in a]
    assert not [a for a in timing_advisories(two_or_default()) if "second region" in a]


def two_or_default() -> StackSettings:
    """A two-region stack whose job keeps the default test retries (10, 30, 70, 150, 310 s)."""
    return build(two_region_values())


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"secondRegion": SECOND, "databaseLocation": ""},
            f"databaseLocation: exactly-once-scheduler:secondRegion is '{SECOND}', but the run ledger's "
            f"database location is unset, so gcp:region '{REGION}', one region",
        ),
        (
            {"secondRegion": SECOND, "databaseLocation": "europe-west1"},
            "database location is 'europe-west1', one region",
        ),
        ({"secondRegion": REGION, "databaseLocation": "eur3"}, f"secondRegion: '{REGION}' is gcp:region too"),
        (
            {"secondRegion": "Europe West 4", "databaseLocation": "eur3"},
            "secondRegion: 'Europe West 4' is not a region name",
        ),
        ({"databaseLocation": "europe"}, "databaseLocation: 'europe' is not a Firestore location"),
        (
            {"secondRegion": SECOND, "databaseName": "(default)"},
            "the existing database '(default)' (exactly-once-scheduler:createDatabase false), whose "
            "location the stack cannot see: set exactly-once-scheduler:databaseLocation",
        ),
        (
            {"secondRegion": SECOND, "databaseName": "(default)", "databaseLocation": "us-east1"},
            "database location is 'us-east1', one region",
        ),
    ],
)
def test_refusals_name_the_keys_and_values(overrides: dict[str, Any], expected: str) -> None:
    assert expected in error_of(valid_values(**overrides))


def test_an_existing_multi_region_database_is_accepted_and_one_region_is_unchanged() -> None:
    existing = build(valid_values(secondRegion="us-east1", databaseName="(default)", databaseLocation="nam5"))
    assert existing.regions == (REGION, "us-east1") and existing.ledger_location == "nam5"
    one = build(valid_values())
    assert one.regions == (REGION,) and one.ledger_location == REGION and one.run_location == REGION
    # A one-region stack may put its own database in a multi-region location too.
    assert build(valid_values(databaseLocation="eur3")).ledger_location == "eur3"
