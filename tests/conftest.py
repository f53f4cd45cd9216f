"""Shared fixtures: one real Firestore emulator per test session, a fresh project per test.

Each test gets its own project id, so tests never see each other's documents and need no
cleanup; the emulator keeps projects apart like separate databases. Under pytest-xdist the
workers share one emulator, started before them, and each picks its free ports from a share
of its own.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from localrun.emulator import EMULATOR_HOST_ENV, PORT_SHARE_ENV, firestore_emulator, port_subshare
from localrun.function_server import FunctionServer

_SHARED_EMULATOR = pytest.StashKey[contextlib.ExitStack]()
FUNCTION_TESTS = Path(__file__).parent / "function"


def pytest_configure(config: pytest.Config) -> None:
    """In pytest-xdist's controller, before it starts the workers: one emulator for all of
    them (FIRESTORE_EMULATOR_HOST, which they inherit), rather than one each, every one of
    them a JVM to start and warm up. In a worker: pick ports only from this worker's share of
    the run's, so no other worker (or run beside this one) picks a port that this one's server
    is about to bind; servers and tools the tests start inherit it."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        index = int(worker["workerid"].removeprefix("gw"))
        os.environ[PORT_SHARE_ENV] = port_subshare(index, int(worker["workercount"]))
        return
    distributed = config.getoption("numprocesses", None) and not config.getoption("collectonly")
    if distributed and not os.environ.get(EMULATOR_HOST_ENV):
        shared = contextlib.ExitStack()
        config.stash[_SHARED_EMULATOR] = shared
        shared.callback(os.environ.pop, EMULATOR_HOST_ENV, None)
        os.environ[EMULATOR_HOST_ENV] = shared.enter_context(firestore_emulator())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `served` the tests of tests/function that serve the function through real
    Functions Framework servers (the `function_servers` fixture, directly or through another
    fixture). The Makefile runs them on the runtime's Python only: the function is deployed on
    python312, and these tests spend most of the suite's time waiting on leases and servers.

    Then the modules marked `slow_module` go first, in their order. pytest-xdist hands whole
    modules to its workers in collection order (the Makefile turns off its reordering by test
    count): a module that keeps one worker busy for minutes (a fork built and tested in a
    copy) must start with the run, not end it alone while the other workers wait."""
    for item in items:
        serves = "function_servers" in getattr(item, "fixturenames", ())
        if serves and item.path.is_relative_to(FUNCTION_TESTS):
            item.add_marker(pytest.mark.served)
    items.sort(key=lambda item: item.get_closest_marker("slow_module") is None)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED_EMULATOR, None)
    if shared is not None:
        shared.close()


@pytest.fixture(scope="session")
def emulator_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with firestore_emulator(log_dir=tmp_path_factory.mktemp("emulator")) as host:
        previous = os.environ.get(EMULATOR_HOST_ENV)
        os.environ[EMULATOR_HOST_ENV] = host
        try:
            yield host
        finally:
            if previous is None:
                os.environ.pop(EMULATOR_HOST_ENV, None)
            else:
                os.environ[EMULATOR_HOST_ENV] = previous


@pytest.fixture
def project(emulator_host: str) -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def db(project: str) -> firestore.Client:
    return firestore.Client(project=project)


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "function-server.log"


@pytest.fixture
def function_servers(log_path: Path) -> Iterator[Callable[..., FunctionServer]]:
    """Start real Functions Framework servers on loopback; all are stopped after the test.
    Each is forked from a process that imported its libraries already (localrun/server_forks.py):
    the same server, without a second of CPU per start."""
    started: list[FunctionServer] = []

    def start(env: Mapping[str, str], **options: Any) -> FunctionServer:
        server = FunctionServer(env, log_path, **{"forked": True, **options})
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
