from __future__ import annotations

import threading

from exactly_once.once import OncePerInstance
from tests.support.proxy_runs import concurrent


def test_value_is_built_once_however_many_requests_race():
    builds = []
    gate = threading.Event()

    def build() -> object:
        builds.append(1)
        gate.wait(timeout=10)  # hold the first builder so the others pile up behind the lock
        return object()

    once = OncePerInstance(build)
    releaser = threading.Timer(0.2, gate.set)
    releaser.start()
    values = concurrent(16, lambda _: once())
    releaser.join()
    assert len(builds) == 1
    assert all(value is values[0] for value in values)


def test_nothing_is_built_until_first_use():
    builds = []

    def build() -> str:
        builds.append(1)
        return "client"

    once = OncePerInstance(build)
    assert builds == []
    assert once() == "client" and once() == "client"
    assert builds == [1]
