"""The bench's own instruments: the modelled network really delays, the import breakdown
really adds up by owner, and the scheduled-run entry point really leaves the token check
unimported (counted, never timed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import cast

import pytest
from google.cloud.firestore import DocumentSnapshot

from bench.imports import FIRST_PARTY, NOT_KEPT, STANDARD_LIBRARY, by_owner, import_profile
from bench.network import firestore_route
from bench.served import OURS_SOURCE
from localrun.firestore_rpcs import counted_emulator_client

ENV = {"GOOGLE_CLOUD_PROJECT": "bench-test", "JOB_HANDLER": "jobs.noop:do_nothing"}


def test_rtt_zero_is_the_direct_connection(emulator_host):
    with firestore_route(emulator_host, 0) as host:
        assert host == emulator_host


def test_a_modelled_round_trip_delays_every_rpc_by_at_least_the_rtt(emulator_host, project):
    with firestore_route(emulator_host, 50) as host:
        assert host != emulator_host
        client, rpcs = counted_emulator_client(host, project)
        document = client.collection("bench-route").document("probe")
        document.set({"seen": True})
        started = time.monotonic()
        assert cast(DocumentSnapshot, document.get()).exists
        assert time.monotonic() - started >= 0.05  # a lower bound: no machine is too fast for it
        assert sum(rpcs.snapshot().values()) == 2


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
