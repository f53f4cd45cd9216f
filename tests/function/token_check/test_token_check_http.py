"""The token check's HTTP entry point, `check_idempotency_token`, served by the Functions
Framework on the Firestore emulator: its answers, bad and hostile requests, lost answers on
the wire, and the endpoint's own errors. The token store underneath: test_idempotency.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
import requests

from exactly_once.config import DEFAULT_IDEMPOTENCY_COLLECTION as COLLECTION
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.token_check.endpoint import TokenCheckEndpoint, handle_token_request
from exactly_once.token_check.tokens import IdempotencyTokens, token_document_id
from localrun.tcp_proxy import tcp_proxy
from tests.support.proxy_runs import RUN_ID, concurrent
from tests.support.waiting import wait_until


@pytest.fixture
def token_server(function_servers, emulator_host, project):
    env = {"FIRESTORE_EMULATOR_HOST": emulator_host, "GOOGLE_CLOUD_PROJECT": project, "THREADS": "48"}
    return function_servers(env, target="check_idempotency_token")


def post(server, body) -> requests.Response:
    return requests.post(server.url, json=body, timeout=30)


def test_http_concurrent_checks_answer_first_once(token_server):
    replies = concurrent(16, lambda _: post(token_server, {"token": RUN_ID, "fence": 5}))
    assert {reply.status_code for reply in replies} == {200}
    assert sorted(reply.json()["first"] for reply in replies) == [False] * 15 + [True]


def test_http_begin_complete_and_duplicate(token_server):
    begin = post(token_server, {"token": RUN_ID, "fence": "1790000000000000000", "scope": "charge"}).json()
    assert (begin["first"], begin["verdict"], begin["recorded_fence"]) == (True, "first", 1790000000000000000)
    stale = post(token_server, {"token": RUN_ID, "fence": 1, "scope": "charge"})
    assert (stale.status_code, stale.json()["verdict"], stale.json()["first"]) == (200, "stale_fence", False)

    wrong = post(token_server, {"action": "complete", "token": RUN_ID, "scope": "charge", "holder": "x"})
    assert (wrong.status_code, wrong.json()["error"]) == (409, "not_holder")
    done = {"action": "complete", "token": RUN_ID, "scope": "charge", "holder": begin["holder"], "result": 7}
    assert post(token_server, done).status_code == 200
    again = post(token_server, {"token": RUN_ID, "scope": "charge"}).json()
    assert (again["first"], again["status"], again["result"]) == (False, "completed", 7)
    assert "holder" not in again


@pytest.mark.parametrize(
    "body",
    [None, [], {"token": ""}, {"token": RUN_ID, "fence": -1}, {"token": RUN_ID, "action": "complete"}],
    ids=str,
)
def test_http_bad_requests_are_400(token_server, body):
    reply = requests.post(token_server.url, data=b"" if body is None else None, json=body, timeout=30)
    assert (reply.status_code, reply.json()["error"]) == (400, "bad_request")


def test_http_only_post(token_server):
    assert requests.get(token_server.url, timeout=30).status_code == 405


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b'{"token": "t", "fence": "\xc2\xb2"}',  # a superscript two: isdigit() says yes
        b'{"token": "t", "fence": 9223372036854775808}',
        b'{"token": "t", "fence": "9223372036854775808"}',
        b'{"token": "t", "fence": 1e400}',
        b'{"action": "complete", "token": "t", "holder": "h", "result": NaN}',
        b'{"action": "complete", "token": "t", "holder": "h", "result": [Infinity]}',
        b'{"token": "t", "scope": "' + b"x" * 70_000 + b'"}',
        b"\xff\xfe",
    ],
    ids=[
        "deep",
        "superscript-fence",
        "fence-2^63",
        "fence-2^63-text",
        "fence-inf",
        "nan",
        "inf",
        "large",
        "utf16",
    ],
)
def test_http_hostile_bodies_are_400_json_and_write_nothing(token_server, db, raw):
    reply = requests.post(token_server.url, data=raw, timeout=30)
    assert (reply.status_code, reply.json()["error"]) == (400, "bad_request"), reply.text
    assert list(db.collection(COLLECTION).stream()) == []


def test_http_a_begin_whose_commit_answer_is_lost_on_the_wire_is_still_first(
    function_servers, emulator_host, project, db
):
    """The begin's create reaches the emulator and commits; its answer is lost and the
    connection drops. The client library sends the create again, which finds the record: the
    holder in it is this begin's own, so the answer is first, and the step can happen."""
    with tcp_proxy(emulator_host) as proxy:
        env = {"FIRESTORE_EMULATOR_HOST": proxy.host, "GOOGLE_CLOUD_PROJECT": project}
        server = function_servers(env, target="check_idempotency_token")
        assert post(server, {"token": "warm-up"}).json()["first"]  # the channel is up
        record = db.collection(COLLECTION).document(token_document_id(RUN_ID))

        proxy.lose_answers()
        replies: list[requests.Response] = []
        begin = threading.Thread(target=lambda: replies.append(post(server, {"token": RUN_ID, "fence": 7})))
        begin.start()
        committed = wait_until(lambda: record.get().exists, timeout=30, what="the begin's commit")
        proxy.deliver_answers()
        begin.join(timeout=60)

        assert committed and replies, "the begin was not answered"
        reply = replies[0].json()
        assert (replies[0].status_code, reply["verdict"], reply["recorded_fence"]) == (200, "first", 7)
        assert reply["holder"] == record.get().get("holder")
        done = {"action": "complete", "token": RUN_ID, "holder": reply["holder"], "result": "done"}
        assert post(server, done).status_code == 200
        duplicate = post(server, {"token": RUN_ID, "fence": 7}).json()
        assert (duplicate["first"], duplicate["status"], duplicate["result"]) == (False, "completed", "done")


def test_http_a_begin_whose_commit_outlives_every_rpc_timeout_is_first_for_its_holder_retry(
    function_servers, emulator_host, project, db
):
    """The commit lands but no answer comes back within the begin's budget: 503. The
    workflow's retry sends the same begin, with the same holder (its execution id), and is
    answered first: the step happens once, not never."""
    with tcp_proxy(emulator_host) as proxy:
        env = {"FIRESTORE_EMULATOR_HOST": proxy.host, "GOOGLE_CLOUD_PROJECT": project}
        server = function_servers(env, target="check_idempotency_token")
        assert post(server, {"token": "warm-up"}).json()["first"]  # the channel is up
        begin = {"token": RUN_ID, "fence": 8, "holder": "execution-1"}

        proxy.lose_answers()
        timed_out = post(server, begin)
        assert db.collection(COLLECTION).document(token_document_id(RUN_ID)).get().exists
        assert (timed_out.status_code, timed_out.json()["error"]) == (503, "store_error")
        proxy.deliver_answers()

        retried = post(server, begin)
        assert (retried.status_code, retried.json()["verdict"]) == (200, "first")
        assert retried.json()["holder"] == "execution-1"
        assert post(server, {**begin, "holder": "execution-2"}).json()["verdict"] == "duplicate"


def test_http_firestore_unreachable_is_503_and_the_same_request_sent_again_is_answered(
    function_servers, emulator_host, project
):
    """The answer the sample workflow's retry predicate retries, and what its retry gets."""
    with tcp_proxy(emulator_host) as proxy:
        env = {"FIRESTORE_EMULATOR_HOST": proxy.host, "GOOGLE_CLOUD_PROJECT": project}
        server = function_servers(env, target="check_idempotency_token")
        begin = {"token": RUN_ID, "fence": 4, "holder": "execution-1"}
        proxy.cut("refuse")
        failed = post(server, begin)
        assert (failed.status_code, failed.json()["error"]) == (503, "store_error")
        proxy.restore()

        def answered_200() -> requests.Response | None:
            reply = post(server, begin)
            return reply if reply.status_code == 200 else None

        retried = wait_until(answered_200, timeout=60, what="Firestore to be reachable again", interval=0.5)
        assert (retried.json()["first"], retried.json()["holder"]) == (True, "execution-1")


def test_http_a_caller_repeating_its_holder_is_first_again(token_server):
    """What a workflow's retry of a begin whose answer it lost sends: its execution id again."""
    begin = {"token": RUN_ID, "fence": 5, "holder": "execution-1"}
    answers = [post(token_server, begin).json() for _ in range(2)]
    assert [(a["first"], a["holder"]) for a in answers] == [(True, "execution-1")] * 2
    other = post(token_server, {**begin, "holder": "execution-2"}).json()
    assert (other["first"], other["verdict"]) == (False, "duplicate")


@pytest.mark.parametrize("holder", ["", "h" * 201, 5, ["h"]], ids=["empty", "long", "number", "list"])
def test_http_a_bad_holder_is_400_naming_it(token_server, db, holder):
    for action in ("begin", "complete"):
        reply = post(token_server, {"action": action, "token": RUN_ID, "holder": holder})
        assert (reply.status_code, reply.json()["error"]) == (400, "bad_request")
        assert "holder" in reply.json()["message"]
    assert list(db.collection(COLLECTION).stream()) == []


def test_http_a_token_with_a_lone_surrogate_is_a_token_like_any_other(token_server):
    body = b'{"token": "\\ud800", "fence": 1}'
    answers = [requests.post(token_server.url, data=body, timeout=30) for _ in range(2)]
    assert [(a.status_code, a.json()["first"]) for a in answers] == [(200, True), (200, False)]


def test_largest_fence_is_accepted(token_server):
    reply = post(token_server, {"token": RUN_ID, "fence": str(2**63 - 1)})
    assert (reply.status_code, reply.json()["recorded_fence"]) == (200, 2**63 - 1)


def test_an_unexpected_error_is_answered_as_json_and_logged(db):
    class Broken(FirestoreRunStore):
        def create(self, run_id, fields, *, timeout):
            raise RuntimeError("a bug")

    logged: list[Mapping[str, Any]] = []
    endpoint = TokenCheckEndpoint(
        IdempotencyTokens(Broken(db, COLLECTION), retention=timedelta(days=1)), log=logged.append
    )
    status, reply = endpoint.handle("POST", b'{"token": "t"}')
    assert (status, reply["error"]) == (500, "internal_error")
    assert "a bug" in logged[-1]["exception"] and logged[-1]["http_status"] == 500


def test_an_endpoint_that_cannot_be_built_still_answers_json(capsys):
    def no_credentials() -> TokenCheckEndpoint:
        raise RuntimeError("no credentials")

    status, reply = handle_token_request(no_credentials, "POST", b'{"token": "t"}')
    assert (status, reply["error"]) == (500, "internal_error")
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (line["severity"], line["error"]) == ("ERROR", "internal_error")
