"""policy/scheduler_guardrails/rules/config/names.py: every id the stack chooses is valid for its kind and
unique per stack."""

from __future__ import annotations

import itertools

import pytest

from policy.scheduler_guardrails.rules.config.names import (
    DATABASE_ID,
    FUNCTION_NAME,
    REPOSITORY_ID,
    SCHEDULER_JOB_ID,
    SERVICE_ACCOUNT_ID,
    WORKFLOW_NAME,
    StackNames,
)

ROLES = ("runtime", "invoker", "builder", "workflow", "tokens")
LONG_JOB = "j" * 100


def every_id(names: StackNames, job: str = "nightly-report") -> dict[str, str]:
    ids = {f"sa:{role}": names.service_account_id(role) for role in ROLES}
    ids |= {f"fn:{role}": names.function_name(role) for role in ("handler", "token-check")}
    return ids | {
        "job": names.scheduler_job_id(job),
        "repository": names.repository_id(),
        "workflow": names.workflow_name(job),
        "database": names.database_id(),
    }


def assert_valid(ids: dict[str, str]) -> None:
    patterns = {
        "sa": SERVICE_ACCOUNT_ID,
        "fn": FUNCTION_NAME,
        "job": SCHEDULER_JOB_ID,
        "repository": REPOSITORY_ID,
        "workflow": WORKFLOW_NAME,
        "database": DATABASE_ID,
    }
    for kind, value in ids.items():
        assert patterns[kind.split(":")[0]].match(value), (kind, value)


def test_short_stack_names_stay_readable() -> None:
    assert every_id(StackNames("dev")) == {
        "sa:runtime": "eos-dev-runtime",
        "sa:invoker": "eos-dev-invoker",
        "sa:builder": "eos-dev-builder",
        "sa:workflow": "eos-dev-workflow",
        "sa:tokens": "eos-dev-tokens",
        "fn:handler": "eos-dev-handler",
        "fn:token-check": "eos-dev-token-check",
        "job": "eos-dev_nightly-report",
        "repository": "eos-dev-functions",
        "workflow": "eos-dev_nightly-report",
        "database": "eos-dev-ledger",
    }


@pytest.mark.parametrize(
    "stack",
    ["a" * 30, "a" * 29 + "b", "feature-branch-preview-1234567", "Prod.EU_West", "x" * 100, "-_-", "9lives"],
)
def test_every_id_is_valid_for_any_stack_name(stack: str) -> None:
    for job in ("nightly-report", LONG_JOB, "trailing-", "A_b"):
        assert_valid(every_id(StackNames(stack), job))
        assert_valid(every_id(StackNames(stack, component="a-much-longer-component-name"), job))


def test_thirty_character_stacks_differing_in_the_last_character_share_no_id() -> None:
    first, second = every_id(StackNames("a" * 29 + "b")), every_id(StackNames("a" * 29 + "c"))
    assert len(first["sa:runtime"]) <= 30
    assert not set(first.values()) & set(second.values())


def test_names_are_stable() -> None:
    """Pinned: a deployed stack's resources are found again by these names; a change here would
    replace its service accounts (their ids hash the stack name) on the next `pulumi up`."""
    ids = every_id(StackNames("a" * 40))
    assert (ids["sa:runtime"], ids["sa:invoker"], ids["sa:builder"]) == (
        "eos-aaaaaaaaaaa-6d4e43-runtime",
        "eos-aaaaaaaaaaa-c28d67-invoker",
        "eos-aaaaaaaaaaa-500f44-builder",
    )
    assert ids["job"] == "eos-" + "a" * 40 + "_nightly-report"


def test_stack_names_that_only_slug_alike_get_different_ids() -> None:
    """`my_stack`, `my.stack` and `my-stack` are different Pulumi stacks."""
    stacks = [StackNames(s) for s in ("my-stack", "my_stack", "my.stack", "My-Stack")]
    for one, other in itertools.combinations(stacks, 2):
        assert not set(every_id(one).values()) & set(every_id(other).values()), (one, other)


def test_a_hyphen_in_the_stack_never_makes_two_jobs_one_id() -> None:
    """Stack `dev` with job `a-b` and stack `dev-a` with job `b` are different jobs."""
    assert StackNames("dev").scheduler_job_id("a-b") != StackNames("dev-a").scheduler_job_id("b")
    assert StackNames("dev").workflow_name("a-b") != StackNames("dev-a").workflow_name("b")


def test_long_job_names_are_shortened_uniquely() -> None:
    names = StackNames("dev")
    workflow = names.workflow_name(LONG_JOB)
    assert len(workflow) == 64
    assert workflow != names.workflow_name(LONG_JOB[:-1] + "k")
    # Scheduler job ids have room for any job name (at most 100 characters).
    assert names.scheduler_job_id(LONG_JOB) == f"eos-dev_{LONG_JOB}"


def test_components_of_one_stack_share_no_id() -> None:
    assert not set(every_id(StackNames("dev")).values()) & set(every_id(StackNames("dev", "eos2")).values())


def test_invalid_component_names_are_refused() -> None:
    with pytest.raises(ValueError, match="component name 'Bad_Name'"):
        StackNames("dev", "Bad_Name")
