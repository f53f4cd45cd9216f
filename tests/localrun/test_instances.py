"""The demo's instance pool: routing an attempt that ends its instance alone, and a warm-up that
survives a function answering 5xx the way Cloud Scheduler does (by retrying)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from localrun.compression import BUSY_ROUND_TRIP_SECONDS, WARM_UP_JOB, CompressedTiming
from localrun.demo import load_settings
from localrun.function_log import executions
from localrun.function_server import FunctionServer
from localrun.instances import InstancePool, WarmUpError
from localrun.tcp_proxy import tcp_proxy
from tests.support.waiting import wait_until

# --- routing, with stand-ins for the servers (only their URL, workers and liveness matter) ---


class StubServer:
    def __init__(self, index: int) -> None:
        self.url = f"http://127.0.0.1:{index + 1}/"
        self.workers = frozenset({index * 100})

    def worker_pids(self) -> frozenset[int]:
        return self.workers

    def answers(self) -> bool:
        return True

    def end_worker(self) -> None:
        """What the watchdog's exit looks like from outside: a new worker serves the port."""
        self.workers = frozenset({next(iter(self.workers)) + 1})


def stub_pool(count: int, time_limit_seconds: float = 3600.0) -> tuple[InstancePool, list[StubServer]]:
    servers = [StubServer(i) for i in range(count)]
    db: Any = None  # routing reads no Firestore
    return InstancePool(servers, db, "runs", time_limit_seconds=time_limit_seconds), servers


def test_an_attempt_sent_alone_has_its_instance_to_itself_until_it_ended():
    pool, servers = stub_pool(3)
    others = []
    with pool.route(alone=True) as alone_url:
        copy = pool.route(url=alone_url)  # its duplicate copy goes with it
        with copy:
            for _ in range(12):
                with pool.route() as url:
                    others.append(url)
    assert alone_url not in others and len(set(others)) == 2

    # Ended and replaced: back in rotation.
    ended = next(server for server in servers if server.url == alone_url)
    ended.end_worker()
    pool.wait_until_serving()
    with pool.route() as first, pool.route() as second, pool.route() as third:
        assert {first, second, third} == {server.url for server in servers}


def test_an_instance_is_drained_before_an_attempt_goes_alone_to_it():
    pool, servers = stub_pool(2)
    taken: list[str] = []
    busy = [pool.route(), pool.route()]
    urls = [route.__enter__() for route in busy]  # one request in flight on each instance
    assert sorted(urls) == sorted(server.url for server in servers)

    def go_alone() -> None:
        with pool.route(alone=True) as url:
            taken.append(url)
            servers[[s.url for s in servers].index(url)].end_worker()

    sender = threading.Thread(target=go_alone)
    sender.start()
    sender.join(timeout=0.5)
    assert taken == []  # waiting: every instance has a request in flight
    busy[0].__exit__(None, None, None)
    sender.join(timeout=30)
    assert taken == [urls[0]]  # the instance it chose, once its request had ended
    busy[1].__exit__(None, None, None)
    pool.wait_until_serving()


def test_one_instance_always_stays_in_rotation():
    pool, servers = stub_pool(2)
    second_alone: list[str] = []
    finished = threading.Event()

    def go_alone() -> None:
        with pool.route(alone=True) as url:
            second_alone.append(url)
            finished.wait(timeout=30)

    with pool.route(alone=True) as first:
        sender = threading.Thread(target=go_alone)
        sender.start()
        sender.join(timeout=0.5)
        assert second_alone == []  # it would leave no instance for everyone else
        with pool.route() as shared:
            assert shared != first
    next(server for server in servers if server.url == first).end_worker()
    wait_until(lambda: second_alone, timeout=30, what="the second attempt to go alone")
    assert second_alone == [first]  # the one given back; the other stays in rotation
    finished.set()
    sender.join(timeout=30)


def test_a_single_instance_is_never_taken_out_of_rotation():
    pool, _ = stub_pool(1)
    with pool.route() as busy, pool.route(alone=True) as alone, pool.route() as other:
        assert busy == alone == other


def test_an_attempt_sent_alone_that_answered_is_given_back_after_its_time_limit():
    pool, _ = stub_pool(2, time_limit_seconds=0.2)
    with pool.route(alone=True) as url:
        pass  # answered: its worker lives on
    pool.wait_until_serving()
    with pool.route() as first, pool.route() as second:
        assert url in {first, second}


# --- warm-up, against the real function ----------------------------------------------------


def test_warm_up_retries_a_5xx_until_the_instance_answers_2xx(emulator_host, project, db, tmp_path):
    settings = load_settings(None)
    job = settings.jobs[0]
    log_path = tmp_path / "function.log"
    compressed = CompressedTiming.of(settings, 20.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS)
    with tcp_proxy(emulator_host) as proxy:
        env = compressed.function_env(
            settings, firestore_project=project, emulator_host=proxy.host, table_dir=tmp_path
        )
        server = FunctionServer(env, log_path)
        pool = InstancePool(
            [server], db, settings.runs_collection, time_limit_seconds=compressed.time_limit_seconds
        )
        proxy.cut("refuse")  # Firestore unreachable: the first deliveries are answered 500
        pool.start()
        try:

            def restore_after_a_store_error() -> None:
                wait_until(lambda: "store_error" in outcomes(log_path), timeout=120, what="a store_error")
                proxy.restore()

            restorer = threading.Thread(target=restore_after_a_store_error)
            restorer.start()
            pool.warm_up(settings, job)
            restorer.join()
        finally:
            pool.stop()
    answered = outcomes(log_path)
    assert "store_error" in answered and answered[-1] in {"executed", "lease_taken_over"}, answered
    assert list(executions(log_path, settings.scheduler_job_id(WARM_UP_JOB)).values()) == [1]


def test_warm_up_gives_up_with_a_clear_error_at_its_deadline(emulator_host, project, db, tmp_path):
    settings = load_settings(None)
    compressed = CompressedTiming.of(settings, 20.0, round_trip_seconds=BUSY_ROUND_TRIP_SECONDS)
    with tcp_proxy(emulator_host) as proxy:
        env = compressed.function_env(
            settings, firestore_project=project, emulator_host=proxy.host, table_dir=tmp_path
        )
        server = FunctionServer(env, tmp_path / "function.log")
        pool = InstancePool(
            [server], db, settings.runs_collection, time_limit_seconds=compressed.time_limit_seconds
        )
        proxy.cut("refuse")
        pool.start()
        try:
            with pytest.raises(
                WarmUpError, match=r"answered no warm-up delivery with a 2xx within 5s \(\d+ tries; last: "
            ):
                pool.warm_up(settings, settings.jobs[0], deadline_seconds=5.0)
        finally:
            pool.stop()


def outcomes(log_path) -> list[str]:
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    return [
        line["outcome"] for line in lines if "outcome" in line and line["outcome"] != "method_not_allowed"
    ]
