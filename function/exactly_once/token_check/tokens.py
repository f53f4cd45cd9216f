"""Idempotency tokens, enforced where state changes: the downstream end of the proxy.

The proxy jobs deduplicate a scheduled run, but a response lost on the way back can still
make them start the downstream step twice (two workflow executions, two HTTP calls), both
carrying the same token. The last line of defence is at the state-changing step itself:

    begin(token, fence, holder?)      -> first: do the step;  otherwise: skip it
    complete(token, holder, result)   after the step (optional: lets duplicates see it done)
    release(token, holder)            after a failed step, so a retry may do it

It is the run ledger's technique (ledger/protocol.py) on another collection: create() decides who is
first, with no transaction; later writes are conditioned on update_time and on the holder
id that begin() recorded, so only the caller that recorded the token can finish it.

Lost answers: begin() records its holder (the caller's own, or one made once per call) with
the token. When its write commits but the answer is lost and the write is sent again (by the
client library after a dropped connection or an RPC that outlived its timeout, or by the
caller, repeating its holder), the record it then finds is recognisably its own, and the
answer is still first, with that holder: otherwise the step would never happen.

Fences: a caller whose fence is lower than the recorded one belongs to an older claim of the
run and is refused as stale. A caller with an equal or higher fence is still a duplicate: the
step may already have happened, and at-most-once is what the token promises.

Clocks: a token's retention runs from the commit of its begin (`started_at`, a server
timestamp) for the retention that begin wrote, judged against a read's read_time, as the run
ledger judges its leases. An instance's clock only dates the TTL field before the commit is
known, and a begin re-dates it when that clock proves behind. So an instance hours slow is
no reason to tell a second caller "first".

The token is not stored: the document id is a hash of the scope and the token (see
token_document_id); a scope (e.g. the step's name) gives one token several steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from google.api_core import exceptions as google_exceptions

from exactly_once import strict_json
from exactly_once.ledger.fields import EXPIRE_AT
from exactly_once.ledger.protocol import utc_now
from exactly_once.ledger.store import (
    COMMIT_TIME,
    MAX_STORE_DEADLINE_SECONDS,
    Budget,
    RecordExists,
    RunStore,
    StaleWrite,
    StoredRecord,
)

# Names the document id scheme below. Ids of another scheme never equal these: a token begun
# under one scheme is a new token under another (see docs/proxy.md).
DOCUMENT_ID_PREFIX = "v2-"
# An instance clock this far behind Firestore's still dates the TTL field well enough: the
# retention judged is Firestore's, and TTL deletion itself runs hours late.
CLOCK_TOLERANCE = timedelta(minutes=5)


class TokenStatus(StrEnum):
    STARTED = "started"
    COMPLETED = "completed"


class Verdict(StrEnum):
    FIRST = "first"  # recorded now: the caller performs the step
    DUPLICATE = "duplicate"  # recorded before: skip the step
    STALE_FENCE = "stale_fence"  # recorded by a newer claim than the caller's: skip, and say so


@dataclass(frozen=True)
class TokenCheck:
    verdict: Verdict
    status: TokenStatus
    recorded_fence: int | None
    holder: str | None  # only for FIRST: proves ownership to complete()/release()
    result: Any = None

    @property
    def first(self) -> bool:
        return self.verdict is Verdict.FIRST


class NotTokenHolder(Exception):
    """complete() by a caller whose token record is not (or no longer) its own; release()
    of a token another caller holds, or that is completed."""


class TokenContention(Exception):
    """The record kept changing under us; the caller should retry shortly."""


def token_document_id(token: str, scope: str = "") -> str:
    """DOCUMENT_ID_PREFIX + the sha256 of the JSON text ["<scope>","<token>"]. JSON quotes
    and escapes both strings, so two different pairs never share an id, whatever they hold
    (NUL, quotes, a token that is itself a hash); ASCII escapes make lone surrogates hashable."""
    pair = json.dumps([scope, token], separators=(",", ":"), ensure_ascii=True)
    return DOCUMENT_ID_PREFIX + hashlib.sha256(pair.encode("ascii")).hexdigest()


class IdempotencyTokens:
    """Token records over a RunStore (FirestoreRunStore on the tokens collection)."""

    MAX_ROUNDS = 5

    def __init__(
        self,
        store: RunStore,
        *,
        retention: timedelta,
        clock: Callable[[], datetime] = utc_now,
        new_holder: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._store = store
        self._retention = retention
        self._clock = clock
        self._new_holder = new_holder

    def begin(
        self, token: str, fence: int | None = None, scope: str = "", holder: str | None = None
    ) -> TokenCheck:
        """`holder` names the caller's attempt at the step (e.g. a workflow execution id), so
        that the caller's own retry of a begin whose answer it lost is answered first again;
        without one, a holder is made for this call."""
        doc_id = token_document_id(token, scope)
        holder = holder or self._new_holder()  # once per call: every write of it carries it
        budget = self._budget("begin")
        for _ in range(self.MAX_ROUNDS):
            record = {
                "status": TokenStatus.STARTED.value,
                "holder": holder,
                "fence": fence,
                "scope": scope,
                "started_at": COMMIT_TIME,  # what retention is counted from: Firestore's clock
                "retention_seconds": self._retention.total_seconds(),
                "completed_at": None,
                "result_json": None,
                # The TTL field, on the instance's clock for want of Firestore's before the
                # write; re-dated from the commit when that clock is found behind.
                EXPIRE_AT: self._clock() + self._retention,
            }
            try:
                update_time = self._store.create(doc_id, record, timeout=budget.left())
            except RecordExists:
                pass
            else:
                self._redate(doc_id, record, update_time, budget)
                return TokenCheck(Verdict.FIRST, TokenStatus.STARTED, fence, holder)
            stored = self._store.get(doc_id, timeout=budget.left())
            if stored is None:
                continue  # released between our create and our read
            fields = stored.fields
            if fields.get("holder") == holder and fields["status"] == TokenStatus.STARTED:
                # Our own write: it committed, its answer was lost, and it was sent again.
                return TokenCheck(Verdict.FIRST, TokenStatus.STARTED, fields.get("fence"), holder)
            if _past_retention(stored):
                # Past retention but not yet deleted by TTL: a new use of the token.
                try:
                    update_time = self._store.update(
                        doc_id, record, if_updated_at=stored.update_time, timeout=budget.left()
                    )
                except StaleWrite:
                    continue  # changed since our read (perhaps by our own update, retried)
                self._redate(doc_id, record, update_time, budget)
                return TokenCheck(Verdict.FIRST, TokenStatus.STARTED, fence, holder)
            recorded_fence = fields.get("fence")
            stale = fence is not None and recorded_fence is not None and fence < recorded_fence
            result_json = fields.get("result_json")
            return TokenCheck(
                Verdict.STALE_FENCE if stale else Verdict.DUPLICATE,
                TokenStatus(fields["status"]),
                recorded_fence,
                None,
                strict_json.loads(result_json) if result_json is not None else None,
            )
        raise TokenContention(doc_id)

    def complete(self, token: str, holder: str, result: Any = None, scope: str = "") -> None:
        """Record the step as done. Repeating it (a retried request) is harmless."""
        doc_id = token_document_id(token, scope)
        result_json = strict_json.dumps(result)
        budget = self._budget("complete")
        for _ in range(self.MAX_ROUNDS):
            stored = self._held(doc_id, holder, budget)
            if stored is None:
                raise NotTokenHolder(doc_id)
            if stored.fields["status"] == TokenStatus.COMPLETED:
                return
            fields: dict[str, Any] = {
                "status": TokenStatus.COMPLETED.value,
                "completed_at": COMMIT_TIME,
                "result_json": result_json,
            }
            # Firestore's clock, as judged: the begin's commit time.
            fields[EXPIRE_AT] = stored.fields["started_at"] + self._retention
            try:
                self._store.update(doc_id, fields, if_updated_at=stored.update_time, timeout=budget.left())
                return
            except StaleWrite:
                continue
        raise TokenContention(doc_id)

    def release(self, token: str, holder: str, scope: str = "") -> None:
        """Forget a started token after the step failed, so a retry may perform it. A
        completed token is never released: the step happened. A token with no record left
        is released already: a release whose answer was lost may be sent again."""
        doc_id = token_document_id(token, scope)
        budget = self._budget("release")
        stored = self._store.get(doc_id, timeout=budget.left())
        if stored is None:
            return
        if stored.fields.get("holder") != holder or stored.fields["status"] != TokenStatus.STARTED:
            raise NotTokenHolder(doc_id)
        try:
            self._store.delete(doc_id, if_updated_at=stored.update_time, timeout=budget.left())
        except StaleWrite:
            # Gone: our own delete committed before a retry of it. Changed: not ours to end.
            if self._store.get(doc_id, timeout=budget.left()) is not None:
                raise NotTokenHolder(doc_id) from None

    def _redate(self, doc_id: str, record: dict[str, Any], committed: datetime, budget: Budget) -> None:
        """Move the TTL field to retention after the commit when the instance's clock put it
        more than CLOCK_TOLERANCE earlier: TTL deletion must not end a token before the
        retention judged on Firestore's clock does. An honest clock costs nothing; a slow one,
        one more write. Its failure is no error: the judgement never reads the TTL field."""
        expire_at = committed + self._retention
        if record[EXPIRE_AT] >= expire_at - CLOCK_TOLERANCE:
            return
        with contextlib.suppress(StaleWrite, google_exceptions.GoogleAPIError):
            self._store.update(doc_id, {EXPIRE_AT: expire_at}, if_updated_at=committed, timeout=budget.left())

    def _budget(self, action: str) -> Budget:
        """Tokens have no lease: each action gets the ledger's longest store deadline, well
        inside the time a workflow's HTTP call waits for its answer."""
        return Budget(MAX_STORE_DEADLINE_SECONDS, f"token {action}")

    def _held(self, doc_id: str, holder: str, budget: Budget) -> StoredRecord | None:
        stored = self._store.get(doc_id, timeout=budget.left())
        if stored is None or stored.fields.get("holder") != holder:
            return None
        return stored


def _past_retention(stored: StoredRecord) -> bool:
    """Whether the token's retention is over, on Firestore's clock: counted from the commit
    of its begin (started_at, a server timestamp) for the retention that begin wrote, against
    the read's time."""
    fields = stored.fields
    ended: datetime = fields["started_at"] + timedelta(seconds=fields["retention_seconds"])
    return ended <= stored.read_time
