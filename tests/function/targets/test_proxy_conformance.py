"""What every proxy target does with a scheduled run, end to end: the real function server, the
emulator, and each kind's loopback fake speaking its client library's wire protocol.

Each scenario runs for every kind (tests/function/targets/proxy_kinds.py), with the kind's own
failures where they differ on the wire; what only one kind does is in its own test module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from localrun.function_server import FunctionServer
from tests.function.targets.proxy_kinds import KINDS, HeldCall, ProxyKind, serving
from tests.support.proxy_runs import concurrent, deliver, redo, run_record
from tests.support.proxy_time_limits import (
    SHORT_TIME_LIMIT,
    TOO_SHORT_FOR_A_CALL,
    ended_attempts,
    released_errors,
)

Serve = Callable[..., FunctionServer]


def per_kind(table: str) -> Any:
    """Parametrise over (kind, case) for every case in each kind's `table`."""
    cases, ids = [], []
    for kind, adapter in KINDS.items():
        for index, case in enumerate(getattr(adapter, table)):
            cases.append((kind, case))
            ids.append(f"{kind}-{getattr(case, 'id', index)}")
    return pytest.mark.parametrize(("proxy", "case"), cases, ids=ids, indirect=["proxy"])


every_kind = pytest.mark.parametrize("proxy", list(KINDS), indirect=True)


@pytest.fixture
def proxy(request: pytest.FixtureRequest) -> Iterator[ProxyKind]:
    yield from serving(request.param)


@pytest.fixture
def serve(function_servers, emulator_host: str, project: str, proxy: ProxyKind) -> Serve:
    return lambda **extra: function_servers(proxy.env(emulator_host, project, **extra))


def send(proxy: ProxyKind, server: FunctionServer) -> requests.Response:
    return deliver(server, proxy.body)


def normal(text: str) -> str:
    return text.replace("_", "").lower()


@every_kind
def test_a_run_starts_once_and_its_duplicate_is_answered_from_the_ledger(proxy, serve):
    server = serve()
    first = send(proxy, server)
    assert (first.status_code, first.json()["outcome"]) == (200, "executed"), first.json()
    calls = proxy.wire_calls()
    again = send(proxy, server)
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")
    assert again.json()["output"] == first.json()["output"]  # the duplicate's answer names the start
    assert proxy.wire_calls() == calls  # answered from the ledger
    assert len(proxy.started()) == 1
    assert proxy.start_keys() == [proxy.run_key]
    assert proxy.start_fences() in ([first.json()["fence"]], [None])


@every_kind
def test_concurrent_duplicates_start_one(proxy, serve):
    server = serve()
    replies = concurrent(proxy.burst, lambda _: send(proxy, server))
    outcomes = Counter(reply.json()["outcome"] for reply in replies)
    assert outcomes["executed"] == 1, outcomes
    assert {reply.status_code for reply in replies} <= {200, 409}
    assert len(proxy.started()) == len(proxy.start_calls()) == 1


@per_kind("transient")
def test_a_transient_failure_releases_the_run_and_the_retry_starts_it_once(proxy, serve, db, case):
    proxy.failures.extend(case.script)
    server = serve()
    failed = send(proxy, server)
    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    assert proxy.started() == []
    assert len(proxy.start_calls()) == (1 if case.reaches_start else 0)

    retried = send(proxy, server)
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed")
    assert send(proxy, server).json()["outcome"] == "duplicate_completed"
    assert len(proxy.started()) == 1
    keys = proxy.start_keys()
    assert keys == [proxy.run_key] * len(keys)
    fences = proxy.start_fences()
    if fences[-1] is not None:  # each attempt's start carries its own, newer fence
        assert fences == sorted(set(fences)) and fences[-1] == retried.json()["fence"]


@per_kind("refusals")
def test_a_refused_start_is_recorded_as_terminal_and_not_retried(proxy, serve, db, case):
    proxy.failures.extend(case.script)
    server = serve()
    reply = send(proxy, server)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    record = run_record(db).to_dict()
    assert record["result"] == "terminal_failure"
    assert normal(case.named) in normal(record["error"]), record["error"]
    assert send(proxy, server).json()["outcome"] == "duplicate_completed"
    assert len(proxy.start_calls()) == 1
    assert proxy.started() == []


@every_kind
def test_a_start_whose_answer_is_lost_leaves_one_run_started_under_one_key(proxy, serve, db):
    """The start took effect, its answer was lost, the run was released and retried: a kind
    that finds its start reuses it; one that cannot starts another under the same key."""
    proxy.failures.extend(proxy.lost_answer)
    server = serve()
    lost = send(proxy, server)
    assert (lost.status_code, lost.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    assert len(proxy.started()) == 1

    retried = send(proxy, server)
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed")
    assert len(proxy.start_calls()) == 1 + proxy.retry_start_calls
    assert proxy.start_keys() == [proxy.run_key] * (1 + proxy.retry_start_calls)
    if proxy.finds_its_start:
        assert retried.json()["output"] == proxy.output(reused=True)
        assert len(proxy.started()) == 1
    else:
        assert len(proxy.started()) == 2


@every_kind
def test_a_redo_delivers_the_same_run_under_the_same_key(proxy, serve, db):
    """`ops redo` deletes the run's record and delivers the run again: a kind that finds its
    start reuses it and starts nothing; one that cannot starts another under the same key."""
    server = serve()
    first = send(proxy, server).json()
    assert first["outcome"] == "executed"
    run_record(db).reference.delete()
    redone = redo(server, proxy.body)
    assert (redone.status_code, redone.json()["outcome"]) == (200, "executed")
    assert len(proxy.start_calls()) == 1 + proxy.retry_start_calls
    assert proxy.start_keys() == [proxy.run_key] * (1 + proxy.retry_start_calls)
    if proxy.finds_its_start:
        assert redone.json()["output"] == proxy.output(reused=True) == {**first["output"], "reused": True}
        assert len(proxy.started()) == 1
    else:
        assert len(proxy.started()) == 2


@per_kind("held_calls")
def test_a_call_held_past_the_time_limit_is_cut_short_and_the_run_released(
    proxy, serve, db, log_path, case: HeldCall
):
    """A 5 s time limit and an answer that never comes: the call's timeout is what the attempt
    has left, not the call timeout, so the attempt answers (released) rather than its instance
    being ended mid-call; the retry finds or starts the run's start, under the same key."""
    proxy.failures.extend(case.script)
    server = serve(**SHORT_TIME_LIMIT)
    held = send(proxy, server)
    assert (held.status_code, held.json()["outcome"]) == (500, "failed_released")
    (error,) = released_errors(log_path)
    assert case.call in error and case.timeout in error, error
    assert ended_attempts(log_path) == []
    assert not run_record(db).exists

    retried = send(proxy, server)
    assert retried.json()["outcome"] == "executed"
    retry_calls = proxy.retry_start_calls if case.starts else 0
    assert len(proxy.start_calls()) == 1 + retry_calls
    assert proxy.start_keys() == [proxy.run_key] * (1 + retry_calls)
    if proxy.finds_its_start:
        assert retried.json()["output"] == proxy.output(reused=case.starts)
        assert len(proxy.started()) == 1
    else:
        assert len(proxy.started()) == 1 + case.starts


@every_kind
def test_too_little_time_for_a_call_releases_the_run_and_calls_nothing(proxy, serve, db, log_path):
    server = serve(**TOO_SHORT_FOR_A_CALL)
    reply = send(proxy, server)
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released")
    assert "not called" in released_errors(log_path)[0]
    assert proxy.wire_calls() == 0 and not run_record(db).exists


@per_kind("refused_bodies")
def test_a_body_it_does_not_take_is_terminal_and_calls_nothing(proxy, serve, db, case):
    server = serve()
    reply = deliver(server, case)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    assert run_record(db).to_dict()["result"] == "terminal_failure"
    assert proxy.wire_calls() == 0
