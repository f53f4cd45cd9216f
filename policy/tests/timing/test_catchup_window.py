"""catchup-window: the deployed audit's catch-up windows against its interval and the retention."""

from __future__ import annotations

import json

from pulumi_policy import EnforcementLevel

from ...scheduler_guardrails.offline import Reported, run_stack_policy, stack_policy
from .. import fixtures


def _audit_jobs(
    window: float, *, retry_window: float = 900, interval: float = 3600, schedule: str = "*/15 * * * *"
) -> str:
    return json.dumps(
        {
            "interval_seconds": interval,
            "jobs": [
                {
                    "name": "eos-dev_demo",
                    "schedule": schedule,
                    "time_zone": "Etc/UTC",
                    "retry_window_seconds": retry_window,
                    "catchup": {"window_seconds": window, "runs": "all"},
                    "delivery": {"headers": {"X-CloudScheduler-JobName": "eos-dev_demo"}, "body": ""},
                }
            ],
            "redelivery": {"url": "https://f", "queue": "projects/p/locations/l/queues/q", "invoker": "i@x"},
        }
    )


def check(audit_jobs: str | None, retention: str = "86400", *, unknown: bool = False) -> Reported:
    """The policy on a stack whose job table holds `audit_jobs` (JSON) as its `audit` (None: no
    audit; `unknown`: a table not known until the update)."""
    function = fixtures.function()
    env = function["serviceConfig"]["environmentVariables"]
    env["RETENTION_SECONDS"] = retention
    table = None if unknown else '{"jobs": {}' + (f', "audit": {audit_jobs}' if audit_jobs else "") + "}"
    resources = fixtures.stack(function=function, table=table, table_unknown=unknown)
    return run_stack_policy(stack_policy("catchup-window"), resources)


def test_the_rule_is_mandatory() -> None:
    assert stack_policy("catchup-window").enforcement_level == EnforcementLevel.MANDATORY


def test_a_window_the_audit_can_serve_passes() -> None:
    assert check(_audit_jobs(4500)).violations == []
    assert check(_audit_jobs(86400)).violations == []
    assert check(None).violations == []  # no audit
    assert check(None, unknown=True).violations == []  # preview


def test_a_window_shorter_than_retry_window_and_interval_is_refused_naming_the_numbers() -> None:
    [(message, urn)] = check(_audit_jobs(4499)).violations
    assert "job eos-dev_demo [catchup-window-reachable]" in message
    assert "retry window 900s + the audit's interval 3600s = 4500s" in message
    assert urn is not None and urn.endswith("eos-function")


def test_a_window_longer_than_the_retention_is_refused() -> None:
    [(message, _)] = check(_audit_jobs(7200), retention="3600").violations
    assert "[catchup-window-within-retention]" in message
    assert "catch-up window 7200s is longer than the ledger's retention 3600s" in message


def test_a_malformed_audit_config_is_reported() -> None:
    [(message, _)] = check("{not json").violations
    assert "(JOB_TABLE): (file): not JSON" in message
    [(message, _)] = check('{"jobs": "all"}').violations
    assert "function 'eos-function' job table's audit: " in message and "interval_seconds" in message


def test_a_window_holding_more_runs_than_the_audit_walks_is_refused() -> None:
    eight_days, ten_days = 8 * 86400, "864000"
    [(message, _)] = check(_audit_jobs(eight_days, schedule="* * * * *"), retention=ten_days).violations
    assert "job eos-dev_demo [catchup-window-runs]" in message
    assert "catch-up window 691200s can hold 11520 runs of schedule '* * * * *' in Etc/UTC" in message
    assert "more than the 10080 the missed-run audit walks for one job" in message
    assert "set at most 604800s" in message and "Fix: shorten the job's catchup.windowSeconds" in message
    assert check(_audit_jobs(7 * 86400, schedule="* * * * *"), retention=ten_days).violations == []
