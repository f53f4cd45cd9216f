"""A job paused after failed runs, end to end: a real Functions Framework server on loopback
running the demo job, deliveries on real threads, the emulator as Firestore."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

from exactly_once.delivery.scheduler_request import SCHEDULE_TIME_HEADER, run_key_from_headers
from exactly_once.run_key import format_rfc3339, parse_rfc3339
from tests.support.demo_runs import HEADERS, RUN_ID, SCHEDULE_TIME, deliver, executions
from tests.support.job_tables import jobs_env
from tests.support.waiting import wait_until

CONCURRENT = 8


def later(minutes: int) -> dict[str, str]:
    time = parse_rfc3339(SCHEDULE_TIME) + timedelta(minutes=minutes)
    return {**HEADERS, SCHEDULE_TIME_HEADER: format_rfc3339(time)}


def lines(log_path) -> list[dict[str, Any]]:
    return [json.loads(text) for text in log_path.read_text().splitlines() if text.startswith("{")]


def test_concurrent_deliveries_of_a_paused_job_are_all_skipped_and_the_pause_is_logged_once(
    start_server, db, log_path
):
    server = start_server(**jobs_env(pause_after_failures={"nightly": 1}))
    failed = deliver(server, {"fail": True})
    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed_released")

    runs = [later(15 * (index + 1)) for index in range(CONCURRENT)]
    replies: list[Any] = [None] * CONCURRENT
    start = threading.Barrier(CONCURRENT)

    def send(index: int) -> None:
        start.wait(timeout=30)
        replies[index] = deliver(server, headers=runs[index])

    threads = [threading.Thread(target=send, args=(index,)) for index in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [(reply.status_code, reply.json()["outcome"]) for reply in replies] == [
        (200, "skipped_paused")
    ] * CONCURRENT
    for headers in runs:
        run_id = run_key_from_headers(headers).run_id
        assert executions(db, run_id) == []
        stored = db.collection("scheduler_runs").document(run_id).get().to_dict()
        assert (stored["status"], stored["result"]) == ("completed", "skipped_paused")

    def skipped() -> list[dict[str, Any]] | None:
        found = [line for line in lines(log_path) if line.get("outcome") == "skipped_paused"]
        return found if len(found) == CONCURRENT else None

    wait_until(skipped, timeout=30, what="every skipped delivery's log line")
    paused = [line for line in lines(log_path) if line.get("event") == "job_paused_after_failures"]
    assert len(paused) == 1
    assert (paused[0]["severity"], paused[0]["failed_runs"]) == ("ERROR", [RUN_ID])

    # The failing run's own retry still runs: its success ends the pause.
    assert deliver(server).json()["outcome"] == "executed"
    assert len(executions(db)) == 1
    assert deliver(server, headers=later(15 * (CONCURRENT + 1))).json()["outcome"] == "executed"
