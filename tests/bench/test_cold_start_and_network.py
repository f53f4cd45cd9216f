"""The bench's own instruments: the modelled network really delays, the import breakdown
really adds up by owner, and the scheduled-run entry point really leaves the token check and
the proxies' API clients unimported until they are used (counted, never timed)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import cast

import pytest
from google.cloud.firestore import DocumentSnapshot

from bench.imports import FIRST_PARTY, NOT_KEPT, STANDARD_LIBRARY, by_owner, import_profile
from bench.network import firestore_route
from bench.served import OURS_SOURCE
from exactly_once.endpoints import (
    BIGQUERY_ENDPOINT_ENV,
    CLOUD_RUN_ENDPOINT_ENV,
    WORKFLOWS_ENDPOINT_ENV,
)
from localrun.firestore_rpcs import counted_emulator_client
from localrun.tcp_proxy import tcp_proxy
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from tests.support.fake_bigquery import FakeBigQuery
from tests.support.fake_cloud_run import FakeCloudRun
from tests.support.fake_workflows import FakeWorkflows
from tests.support.job_tables import jobs_env
from tests.support.optional import needs_proxy_kinds

ENV = {"GOOGLE_CLOUD_PROJECT": "bench-test", "JOB_HANDLER": "jobs.noop:do_nothing"}
# The client libraries of the BigQuery, Cloud Run and Workflows proxy jobs.
CLIENT_PACKAGES = ["google.cloud.bigquery", "google.cloud.run_v2", "google.cloud.workflows"]
CLOUD_RUN_JOB = "projects/acme/locations/europe-west1/jobs/nightly-export"
WORKFLOW = "projects/acme/locations/europe-west1/workflows/nightly-report"


def test_rtt_zero_is_the_direct_connection(emulator_host):
    with firestore_route(emulator_host, 0) as host:
        assert host == emulator_host


def test_a_modelled_round_trip_routes_the_client_through_the_proxy(emulator_host, project):
    with firestore_route(emulator_host, 50) as host:
        assert host != emulator_host
        client, rpcs = counted_emulator_client(host, project)
        document = client.collection("bench-route").document("probe")
        document.set({"seen": True})
        assert cast(DocumentSnapshot, document.get()).exists
        assert sum(rpcs.snapshot().values()) == 2


def test_a_modelled_round_trip_holds_every_chunk_half_the_rtt_each_way(emulator_host, project):
    """The proxy's own account of each chunk, from the read that received it to the send that
    passed it on: every request and every answer waited half the RTT, so an RPC costs at least
    one round trip. Nothing here depends on how fast the machine is."""
    rtt = 0.05
    with tcp_proxy(emulator_host, round_trip_seconds=rtt) as proxy:
        client, rpcs = counted_emulator_client(proxy.host, project)
        document = client.collection("bench-route").document("probe")
        document.set({"seen": True})
        assert cast(DocumentSnapshot, document.get()).exists
        assert sum(rpcs.snapshot().values()) == 2
        for delays in (proxy.request_delays, proxy.answer_delays):
            assert delays.chunks >= 2  # at least one chunk per RPC, each way
            assert delays.shortest_seconds >= rtt / 2


def test_a_negative_rtt_is_refused(emulator_host):
    with pytest.raises(ValueError, match="0 ms or more"), firestore_route(emulator_host, -1):
        pass


def test_import_self_times_are_added_up_per_owner_after_the_marker():
    output = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       500 |        500 |   site",  # start-up: not measured
            "--- measured import starts ---",
            "import time:      1500 |       1500 |     grpc._cython",
            "import time:       250 |       1750 |   grpc",
            "import time:      1000 |       1000 |   json",
            "import time:       125 |        125 |     brotli",  # tried, failed: not in sys.modules
            "import time:      2000 |       2000 | main",
            "--- measured import ends ---",
            "import time:       700 |        700 | pathlib",  # the breakdown's own imports
        ]
    )
    owners = {"grpc": "grpcio", "grpc._cython": "grpcio", "json": STANDARD_LIBRARY, "main": FIRST_PARTY}
    assert by_owner(output, owners) == {
        "grpcio": 1.75,
        STANDARD_LIBRARY: 1.0,
        FIRST_PARTY: 2.0,
        NOT_KEPT: 0.125,
    }


def test_our_entry_module_imports_our_package_and_the_firestore_client():
    profile = import_profile(OURS_SOURCE, ENV)
    assert {FIRST_PARTY, "google-cloud-firestore", "functions-framework", STANDARD_LIBRARY} <= set(profile)
    assert all(milliseconds >= 0 for milliseconds in profile.values())


def test_serving_scheduled_runs_does_not_import_the_token_check():
    """An instance imports the token check's code on its first token request only."""
    code = (
        "import sys, main; print(sorted(m for m in sys.modules if m.startswith('exactly_once.token_check')))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=OURS_SOURCE.parent,
        env={**os.environ, **ENV, "PYTHONPATH": str(OURS_SOURCE.parent)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = completed.stdout.strip().splitlines()[-1]
    assert loaded == "['exactly_once.token_check', 'exactly_once.token_check.settings']"


# Runs in a fresh interpreter: start the function (import main, which resolves every handler of
# the job table), then run each job named in argv once, saying which clients are loaded after each.
_RUN_EACH_JOB = """
import json, sys
from datetime import UTC, datetime
import main
from exactly_once import RunContext
clients = json.loads(sys.argv[1])
loaded = lambda: sorted(name for name in clients if name in sys.modules)
seen = {"started": loaded()}
for job, body in json.loads(sys.argv[2]):
    run = RunContext("r", job, datetime.now(UTC), "p", "l", "a", 1, body.encode())
    main.JOBS.run(run)
    seen[job] = loaded()
print(json.dumps(seen))
"""


@pytest.fixture
def fakes() -> Iterator[tuple[FakeBigQuery, FakeCloudRun, FakeWorkflows]]:
    with contextlib.ExitStack() as stack:
        started = (FakeBigQuery(), FakeCloudRun(jobs={CLOUD_RUN_JOB}), FakeWorkflows())
        for fake in started:
            stack.callback(fake.stop)
            fake.start()
        yield started


@needs_proxy_kinds
def test_a_proxy_job_s_api_client_is_imported_by_its_first_run_not_at_start_up(fakes):
    """The router imports every module of the job table's handlers when the instance starts; the client
    libraries those modules use wait for a run of their job (each against its loopback fake)."""
    bigquery, cloud_run, workflows = fakes
    # Each kind's handler and table as the stack names them (the kinds' own modules are theirs).
    kinds = {kind.key: kind for kind in TARGET_KINDS}
    bigquery_kind, cloud_run_kind = kinds["bigquery"], kinds["cloudRunJob"]
    assert bigquery_kind.environment_variable and cloud_run_kind.environment_variable
    query = {"project": "acme-data", "location": "EU", "query": "SELECT 1"}
    handlers = {
        "rollup": bigquery_kind.handler,
        "export": cloud_run_kind.handler,
        "report": kinds["workflow"].handler,
    }
    env = {
        **ENV,
        **jobs_env(handlers),
        bigquery_kind.environment_variable: json.dumps({"rollup": query}),
        cloud_run_kind.environment_variable: json.dumps({"export": {"job": CLOUD_RUN_JOB}}),
        BIGQUERY_ENDPOINT_ENV: bigquery.endpoint,
        CLOUD_RUN_ENDPOINT_ENV: cloud_run.endpoint,
        WORKFLOWS_ENDPOINT_ENV: workflows.endpoint,
    }
    runs = [("rollup", ""), ("export", ""), ("report", json.dumps({"workflow": WORKFLOW}))]
    completed = subprocess.run(
        [sys.executable, "-c", _RUN_EACH_JOB, json.dumps(CLIENT_PACKAGES), json.dumps(runs)],
        cwd=OURS_SOURCE.parent,
        env={**os.environ, **env, "PYTHONPATH": str(OURS_SOURCE.parent)},
        capture_output=True,
        text=True,
        check=True,
    )
    bq, run, wf = CLIENT_PACKAGES
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == {
        "started": [],
        "rollup": [bq],
        "export": [bq, run],
        "report": [bq, run, wf],
    }
    assert (len(bigquery.created()), len(cloud_run.run_requests), len(workflows.started)) == (1, 1, 1)
