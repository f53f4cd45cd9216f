"""The token store (IdempotencyTokens) on the Firestore emulator: exactly one caller of a
token proceeds, fences refuse stale callers, and writes sent twice by the client library's
retries never make two firsts. Its HTTP entry point: test_token_check_http.py."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import timedelta

import pytest

from exactly_once.config import DEFAULT_IDEMPOTENCY_COLLECTION, ConfigError
from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.token_check.settings import TokenStoreConfig
from exactly_once.token_check.tokens import (
    DOCUMENT_ID_PREFIX,
    IdempotencyTokens,
    NotTokenHolder,
    TokenStatus,
    Verdict,
    token_document_id,
)
from tests.support.clock import FakeClock
from tests.support.proxy_runs import RUN_ID, concurrent
from tests.support.waiting import wait_until

COLLECTION = DEFAULT_IDEMPOTENCY_COLLECTION


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
    """Expiry is judged on Firestore's clock, whatever the writer's clock said: from the
    begin's commit, for the retention it wrote, against the read's read_time. A record
    written by an instance two days behind is not past its one-day retention; one of a
    second's retention, written by an instance two days ahead, is a second later."""
    behind = tokens_on(db, clock=FakeClock(offset=-timedelta(days=2)))
    assert behind.begin("t").first
    assert not tokens_on(db).begin("t").first
    ahead = IdempotencyTokens(
        FirestoreRunStore(db, COLLECTION),
        retention=timedelta(seconds=1),
        clock=FakeClock(offset=timedelta(days=2)),
    )
    assert ahead.begin("u").first
    wait_until(lambda: tokens_on(db).begin("u").first, timeout=30, what="the token's retention to end")
    assert not tokens_on(db).begin("u").first


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

    def update(self, run_id, fields, *, if_updated_at, timeout, also=()):
        if self.method == "update" and not self.sent_twice:
            self.sent_twice += 1
            super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)
        return super().update(run_id, fields, if_updated_at=if_updated_at, timeout=timeout, also=also)

    def delete(self, run_id, *, if_updated_at, timeout, also=()):
        if self.method == "delete" and not self.sent_twice:
            self.sent_twice += 1
            super().delete(run_id, if_updated_at=if_updated_at, timeout=timeout, also=also)
        return super().delete(run_id, if_updated_at=if_updated_at, timeout=timeout, also=also)


@pytest.mark.parametrize("method", ["create", "update"])
def test_a_begin_whose_write_is_sent_again_after_committing_is_still_first(db, method):
    """create: a new token; update: the reuse of an expired one (its record is overwritten)."""
    if method == "update":
        brief = IdempotencyTokens(FirestoreRunStore(db, COLLECTION), retention=timedelta(seconds=1))
        assert brief.begin(RUN_ID).first
        document = db.collection(COLLECTION).document(token_document_id(RUN_ID))

        def expired() -> bool:
            snapshot = document.get()
            return bool(snapshot.read_time >= snapshot.get("started_at") + timedelta(seconds=1))

        wait_until(expired, timeout=30, what="the token's retention to end")
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
    assert TokenStoreConfig.from_env({"IDEMPOTENCY_COLLECTION": " "}).collection == COLLECTION
    for retention in ("-1", "soon", "inf"):
        with pytest.raises(ConfigError, match="IDEMPOTENCY_RETENTION_SECONDS"):
            TokenStoreConfig.from_env({"IDEMPOTENCY_RETENTION_SECONDS": retention})
    # Judged as the runs collection is (exactly_once.config.collection_id).
    for collection in ("a/b", "__tokens__"):
        with pytest.raises(ConfigError, match=r"IDEMPOTENCY_COLLECTION: .* is not a Firestore collection id"):
            TokenStoreConfig.from_env({"IDEMPOTENCY_COLLECTION": collection})
