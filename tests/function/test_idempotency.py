"""Downstream token checks on the Firestore emulator, in-process and over HTTP."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
import requests

from exactly_once.config import ConfigError
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.token_check.endpoint import TokenCheckEndpoint, handle_token_request
from exactly_once.token_check.settings import TokenStoreConfig
from exactly_once.token_check.tokens import (
    DOCUMENT_ID_PREFIX,
    IdempotencyTokens,
    NotTokenHolder,
    TokenStatus,
    Verdict,
    token_document_id,
)
from localrun.tcp_proxy import tcp_proxy
from tests.support.clock import FakeClock
from tests.support.proxy_runs import RUN_ID, concurrent
from tests.support.waiting import wait_until

COLLECTION = "idempotency_tokens"


def tokens_on(db, **kwargs) -> IdempotencyTokens:
    return IdempotencyTokens(FirestoreRunStore(db, COLLECTION), retention=timedelta(days=1), **kwargs)


def test_exactly_one_of_many_concurrent_callers_proceeds(db):
    tokens = tokens_on(db)
    checks = concurrent(24, lambda _: tokens.begin(RUN_ID, fence=7))
    verdicts = Counter(check.verdict for check in checks)
    assert verdicts == {Verdict.FIRST: 1, Verdict.DUPLICATE: 23}
    assert sum(check.holder is not None for check in checks) == 1


def test_concurrent_callers_with_different_fences_still_let_one_proceed(db):
    tokens = tokens_on(db)
    checks = concurrent(16, lambda i: tokens.begin("order-17", fence=100 + i))
    assert sum(check.first for check in checks) == 1
    winner = next(check for check in checks if check.first)
    for index, check in enumerate(checks):
        if not check.first:
            expected = Verdict.STALE_FENCE if 100 + index < winner.recorded_fence else Verdict.DUPLICATE
            assert check.verdict == expected
            assert check.recorded_fence == winner.recorded_fence


def test_a_stale_fence_is_refused_and_a_newer_one_is_a_duplicate(db):
    tokens = tokens_on(db)
    assert tokens.begin(RUN_ID, fence=200).verdict == Verdict.FIRST
    stale = tokens.begin(RUN_ID, fence=100)
    assert (stale.verdict, stale.first, stale.recorded_fence) == (Verdict.STALE_FENCE, False, 200)
    assert tokens.begin(RUN_ID, fence=300).verdict == Verdict.DUPLICATE
    assert tokens.begin(RUN_ID).verdict == Verdict.DUPLICATE  # no fence: no fence check


def test_completion_is_visible_to_duplicates_and_only_the_holder_may_finish(db):
    tokens = tokens_on(db)
    first = tokens.begin("payment-9", fence=1)
    assert first.holder is not None
    with pytest.raises(NotTokenHolder):
        tokens.complete("payment-9", "someone-else", {"charged": True})
    tokens.complete("payment-9", first.holder, {"charged": True})
    tokens.complete("payment-9", first.holder, {"charged": True})  # a retried request: harmless
    duplicate = tokens.begin("payment-9", fence=2)
    assert (duplicate.status, duplicate.result) == (TokenStatus.COMPLETED, {"charged": True})
    with pytest.raises(NotTokenHolder):
        tokens.release("payment-9", first.holder)  # completed: the step happened


def test_release_after_a_failed_step_lets_the_retry_proceed(db):
    tokens = tokens_on(db)
    first = tokens.begin(RUN_ID, fence=1)
    assert first.holder is not None
    with pytest.raises(NotTokenHolder):
        tokens.release(RUN_ID, "not-the-holder")
    tokens.release(RUN_ID, first.holder)
    assert tokens.begin(RUN_ID, fence=2).first


def test_an_expired_record_is_a_new_use_of_the_token(db):
    """Expiry is judged on Firestore's clock (the read's read_time): a record written by an
    instance whose clock ran two days behind is past its one-day retention already."""
    behind = tokens_on(db, clock=FakeClock(offset=-timedelta(days=2)))
    assert behind.begin("t").first
    assert tokens_on(db).begin("t").first
    assert not tokens_on(db).begin("t").first


def test_scopes_separate_steps_and_document_ids_hide_other_tokens(db):
    tokens = tokens_on(db)
    assert tokens.begin(RUN_ID, scope="charge").first
    assert tokens.begin(RUN_ID, scope="email").first
    assert tokens.begin(RUN_ID).first
    pair = json.dumps(["", RUN_ID], separators=(",", ":")).encode()
    assert token_document_id(RUN_ID) == DOCUMENT_ID_PREFIX + hashlib.sha256(pair).hexdigest()
    stored = {doc.id for doc in db.collection(COLLECTION).stream()}
    assert len(stored) == 3 and all(doc_id.startswith(DOCUMENT_ID_PREFIX) for doc_id in stored)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("c", "a\0b"), ("b\0c", "a")),  # (token, scope) pairs that join to one text
        (("order-17", ""), (hashlib.sha256(b"\0order-17").hexdigest(), "")),  # a hash, as a token
        (("x", ""), ('x"', "")),
        (("\ud800", ""), ("\udc00", "")),  # lone surrogates, which UTF-8 cannot encode
    ],
    ids=["nul-separator", "hash-token", "quote", "lone-surrogates"],
)
def test_different_tokens_never_share_a_record(db, one, other):
    tokens = tokens_on(db)
    assert token_document_id(*one) != token_document_id(*other)
    assert tokens.begin(one[0], scope=one[1]).first
    assert tokens.begin(other[0], scope=other[1]).first
    assert not tokens.begin(other[0], scope=other[1]).first


# --- lost answers ------------------------------------------------------------------------------


class SentTwice(FirestoreRunStore):
    """The client library's retry of a write whose commit outlived the per-RPC timeout (or
    whose answer a dropped connection lost): the write is sent again after it committed."""

    def __init__(self, client, collection: str, method: str) -> None:
        super().__init__(client, collection)
        self.method = method
        self.sent_twice = 0

    def create(self, run_id, fields, *, timeout):
        if self.method == "create" and not self.sent_twice:
            self.sent_twice += 1
            super().create(run_id, fields, timeout=timeout)  # commits; its answer is lost
        return super().create(run_id, fields, timeout=timeout)

    def update(self, run_id, fields, *, if_updated_at, timeout):
        if self.method == "update" and not self.sent_twice:
            self.sent_twice += 1
            super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout)
        return super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout)

    def delete(self, run_id, *, if_updated_at, timeout):
        if self.method == "delete" and not self.sent_twice:
            self.sent_twice += 1
            super().delete(run_id, if_updated_at=if_updated_at, timeout=timeout)
        return super().delete(run_id, if_updated_at=if_updated_at, timeout=timeout)


@pytest.mark.parametrize("method", ["create", "update"])
def test_a_begin_whose_write_is_sent_again_after_committing_is_still_first(db, method):
    """create: a new token; update: the reuse of an expired one (its record is overwritten)."""
    if method == "update":
        assert tokens_on(db, clock=FakeClock(offset=-timedelta(days=2))).begin(RUN_ID).first
    store = SentTwice(db, COLLECTION, method)
    check = IdempotencyTokens(store, retention=timedelta(days=1)).begin(RUN_ID, fence=9)
    assert store.sent_twice == 1
    assert (check.verdict, check.recorded_fence) == (Verdict.FIRST, 9)
    stored = db.collection(COLLECTION).document(token_document_id(RUN_ID)).get()
    assert stored.get("holder") == check.holder
    assert not tokens_on(db).begin(RUN_ID, fence=9).first  # and it is still one token


@pytest.mark.parametrize("method", ["update", "delete"])
def test_a_complete_or_release_sent_again_after_committing_succeeds(db, method):
    first = tokens_on(db).begin(RUN_ID, fence=1)
    assert first.holder is not None
    store = SentTwice(db, COLLECTION, method)
    tokens = IdempotencyTokens(store, retention=timedelta(days=1))
    if method == "update":
        tokens.complete(RUN_ID, first.holder, {"sent": "twice"})
        assert tokens_on(db).begin(RUN_ID).result == {"sent": "twice"}
    else:
        tokens.release(RUN_ID, first.holder)
        assert tokens_on(db).begin(RUN_ID, fence=2).first  # released: the retry may act
    assert store.sent_twice == 1


def test_a_caller_repeating_its_holder_is_first_again_and_no_one_else_is(db):
    tokens = tokens_on(db)
    first = tokens.begin(RUN_ID, fence=3, holder="execution-1")
    assert (first.first, first.holder) == (True, "execution-1")
    again = tokens.begin(RUN_ID, fence=3, holder="execution-1")  # its answer was lost: retried
    assert (again.first, again.holder, again.recorded_fence) == (True, "execution-1", 3)
    other = tokens.begin(RUN_ID, fence=3, holder="execution-2")
    assert (other.verdict, other.holder) == (Verdict.DUPLICATE, None)
    tokens.complete(RUN_ID, "execution-1", {"done": True})
    done = tokens.begin(RUN_ID, fence=3, holder="execution-1")  # completed: the step happened
    assert (done.verdict, done.status) == (Verdict.DUPLICATE, TokenStatus.COMPLETED)
    assert done.result == {"done": True}


def test_config_names_the_variable():
    assert TokenStoreConfig.from_env({}) == TokenStoreConfig()
    with pytest.raises(ConfigError, match="IDEMPOTENCY_RETENTION_SECONDS"):
        TokenStoreConfig.from_env({"IDEMPOTENCY_RETENTION_SECONDS": "-1"})
    with pytest.raises(ConfigError, match="IDEMPOTENCY_COLLECTION"):
        TokenStoreConfig.from_env({"IDEMPOTENCY_COLLECTION": "a/b"})


# --- the HTTP entry point, served by the Functions Framework ---------------------------


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
