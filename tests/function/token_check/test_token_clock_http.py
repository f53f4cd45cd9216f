"""The token check served by a real Functions Framework process whose wall clock is two
hours slow (tests/support/faulty_instance.py), with tokens kept for one hour: retention is
dated and judged on Firestore's clock, so the instance's clock decides nothing, and exactly
one of three concurrent callers is told to act."""

from __future__ import annotations

from datetime import timedelta

import requests

from exactly_once.config import DEFAULT_IDEMPOTENCY_COLLECTION as COLLECTION
from exactly_once.token_check.tokens import token_document_id
from tests.support.faulty_instance import Faults, instance_env
from tests.support.proxy_runs import RUN_ID, concurrent

RETENTION = timedelta(hours=1)


def test_an_instance_two_hours_slow_tells_one_of_three_concurrent_callers_first(
    function_servers, emulator_host, project, db, tmp_path
):
    env = instance_env(
        emulator_host,
        project,
        Faults(tmp_path / "faults.json"),
        "marked_sleep",
        INSTANCE_CLOCK_OFFSET_SECONDS=str(-2 * 3600),
        IDEMPOTENCY_RETENTION_SECONDS=str(RETENTION.total_seconds()),
        THREADS="48",
    )
    server = function_servers(env, target="check_idempotency_token")
    body = {"token": RUN_ID, "fence": 5}

    replies = concurrent(3, lambda _: requests.post(server.url, json=body, timeout=60))

    assert {reply.status_code for reply in replies} == {200}
    assert sorted(reply.json()["first"] for reply in replies) == [False, False, True]
    later = requests.post(server.url, json=body, timeout=60).json()
    assert (later["first"], later["verdict"]) == (False, "duplicate")
    record = db.collection(COLLECTION).document(token_document_id(RUN_ID)).get()
    # The TTL field too is retention after the begin's commit, not the slow clock's idea of it.
    assert record.get("expire_at") >= record.get("started_at") + RETENTION - timedelta(minutes=5)
