"""Every alert policy closes its incidents: a log-based counter writes no point while nothing
is logged, and an incident left open for the 7-day default hides the next one of its job."""

from __future__ import annotations

import re

import pytest

from infra.monitoring.alerts import ALERTS, INCIDENT_AUTO_CLOSE_SECONDS
from tests.infra.conftest import build, valid_job, valid_values
from tools.mocked_program import mock_stack

ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
# Cloud Monitoring's shortest auto-close.
SHORTEST_AUTO_CLOSE_SECONDS = 1800


@pytest.mark.parametrize("preview", [False, True], ids=["applied", "preview"])
def test_every_alert_policy_closes_its_incidents_after_at_least_30_minutes(preview: bool) -> None:
    policies = mock_stack(build(valid_values(jobs=[valid_job()])), preview=preview).of_type(ALERT)
    assert len(policies) == len(ALERTS)
    for policy in policies:
        auto_close = policy.inputs["alertStrategy"]["autoClose"]
        match = re.fullmatch(r"(\d+)s", auto_close)
        assert match is not None, auto_close
        assert int(match.group(1)) == INCIDENT_AUTO_CLOSE_SECONDS >= SHORTEST_AUTO_CLOSE_SECONDS
