"""Where the audit's catch-up deliveries go when the stack is in two regions: one redelivery
per region, each function picking its own by the region it is told it serves in, so that the
region still up catches up through its own queue to its own function."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exactly_once.audit.config import AuditConfig, AuditedJob, AuditError, Redelivery

A = Redelivery("https://a-p.cloudfunctions.net/f", "projects/p/locations/a/queues/q", "i@x", region="a")
B = Redelivery("https://b-p.cloudfunctions.net/f", "projects/p/locations/b/queues/q", "i@x", region="b")
EVERY = Redelivery("https://a-p.cloudfunctions.net/f", "projects/p/locations/a/queues/q", "i@x")
JOB = AuditedJob(name="j", schedule="0 * * * *", time_zone="Etc/UTC", retry_window_seconds=60)


def _config(*redeliveries: Redelivery) -> AuditConfig:
    return AuditConfig(jobs=(JOB,), interval_seconds=3600, redeliveries=redeliveries)


def _raw(redelivery: Any) -> str:
    raw = json.loads(_config().to_json())
    raw["redelivery"] = redelivery
    return json.dumps(raw)


def test_one_region_keeps_the_one_object_it_always_wrote() -> None:
    raw = json.loads(_config(EVERY).to_json())
    assert raw["redelivery"] == {"url": EVERY.url, "queue": EVERY.queue, "invoker": "i@x"}
    again = AuditConfig.from_json(_config(EVERY).to_json())
    # Whatever region a function serves in (or none), it sends through the one.
    assert [again.redelivery_for(region) for region in (None, "a", "z")] == [EVERY, EVERY, EVERY]


def test_two_regions_write_a_list_and_each_function_picks_its_own() -> None:
    config = _config(A, B)
    raw = json.loads(config.to_json())
    assert [item["region"] for item in raw["redelivery"]] == ["a", "b"]
    again = AuditConfig.from_json(config.to_json())
    assert again == config
    assert (again.redelivery_for("a"), again.redelivery_for("b")) == (A, B)
    assert _config().redelivery_for("a") is None


@pytest.mark.parametrize("region", [None, "c"])
def test_a_function_whose_region_the_list_does_not_name_is_refused(region: str | None) -> None:
    with pytest.raises(
        AuditError, match=f"names the regions a, b, not this function's \\(SERVING_REGION={region!r}\\)"
    ):
        _config(A, B).redelivery_for(region)


@pytest.mark.parametrize(
    ("redelivery", "problem"),
    [
        ([], "redelivery: expected one object, or a list of one per region"),
        ([A.to_json(), EVERY.to_json()], "redelivery[1].region: missing"),
        ([A.to_json(), {**B.to_json(), "region": "a"}], "redelivery: a region named twice"),
        ([A.to_json(), {**B.to_json(), "region": 3}], "redelivery[1].region: expected a non-empty string"),
        ([A.to_json(), {**B.to_json(), "zone": "b"}], "redelivery[1]: expected"),
        ([A.to_json(), {"region": "b"}], "redelivery[1].url: missing"),
        ({**A.to_json(), "region": ""}, "redelivery.region: expected a non-empty string"),
    ],
)
def test_a_malformed_regional_redelivery_is_refused_by_name(redelivery: Any, problem: str) -> None:
    with pytest.raises(AuditError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        AuditConfig.from_json(_raw(redelivery))


def test_a_redelivery_for_every_region_beside_regional_ones_is_refused() -> None:
    with pytest.raises(AuditError, match="with more than one, each names its region"):
        _config(EVERY, B)
