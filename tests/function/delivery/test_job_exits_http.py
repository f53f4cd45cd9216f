"""A job that leaves by sys.exit(), KeyboardInterrupt or GeneratorExit, served by a real
Functions Framework process: each is a failure of that job like any exception, answered and
logged, its claim released; the worker that ran it serves the next delivery."""

from __future__ import annotations

import pytest
import requests

from localrun.function_log import log_lines
from tests.support.demo_runs import HEADERS, run_record
from tests.support.faulty_instance import EXITS, Faults, instance_env, marks


@pytest.mark.parametrize("how", sorted(EXITS))
def test_a_job_that_exits_fails_released_and_the_worker_lives_on(
    function_servers, emulator_host, project, db, tmp_path, log_path, how
):
    faults = Faults(tmp_path / "faults.json")
    server = function_servers(instance_env(emulator_host, project, faults, "exits"))
    workers = server.worker_pids()

    replies = [requests.post(server.url, headers=HEADERS, json={"how": how}, timeout=60) for _ in range(2)]

    for reply in replies:
        assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released"), reply.text
    assert not run_record(db).exists  # released each time: the next retry runs at once
    assert len(marks(db)) == 2  # each delivery ran the job once
    assert server.worker_pids() == workers  # no worker ended
    failed = [line for line in log_lines(log_path) if line.get("outcome") == "failed_released"]
    assert len(failed) == 2
    expected = {"exit": "SystemExit", "interrupt": "KeyboardInterrupt", "generator": "GeneratorExit"}[how]
    assert all(expected in line["error"] for line in failed)
