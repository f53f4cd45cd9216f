"""Claim writes that may have committed without this instance hearing so.

A claim's write whose answer was lost may have committed all the same; the ledger must then
recognise the record it finds as its own, with the lease clock running from that write's send
and the kind of claim it made. A claim given up while such a write was out is remembered here,
so the instance's next claim of the run continues from it instead of waiting out its own lease.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from exactly_once.ledger.lifecycle import ClaimKind, StoredRecord, holds_claim


@dataclass(frozen=True)
class SentClaim:
    """A claim write that may have committed: the kind of claim it makes, and when it was
    sent (time.monotonic()). Merged, the earliest send and the latest kind."""

    kind: ClaimKind
    sent_at: float

    @staticmethod
    def merge(earlier: SentClaim | None, later: SentClaim | None) -> SentClaim | None:
        if earlier is None or later is None:
            return earlier or later
        return SentClaim(later.kind, min(earlier.sent_at, later.sent_at))

    def since(self, unheard: SentClaim | None) -> float:
        """When the lease clock of a claim this write won starts."""
        return self.sent_at if unheard is None else min(unheard.sent_at, self.sent_at)


@dataclass(frozen=True)
class AbandonedClaim:
    attempt_id: str
    kind: ClaimKind
    sent_at: float

    def holds(self, stored: StoredRecord) -> bool:
        return holds_claim(stored, self.attempt_id)


class AbandonedClaims:
    """Claims this instance gave up on while a write of theirs may have committed: by run,
    for a lease (after that, their record is anybody's to take over anyway), and a bounded
    number of them (a run never delivered here again must not be kept for ever)."""

    LIMIT = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[str, AbandonedClaim] = {}

    def put(self, run_id: str, attempt_id: str, write: SentClaim | None) -> None:
        if write is None:
            return
        with self._lock:
            self._claims.pop(run_id, None)
            while len(self._claims) >= self.LIMIT:
                del self._claims[next(iter(self._claims))]
            self._claims[run_id] = AbandonedClaim(attempt_id, write.kind, write.sent_at)

    def take(self, run_id: str, not_before: float) -> AbandonedClaim | None:
        with self._lock:
            abandoned = self._claims.pop(run_id, None)
        if abandoned is None or abandoned.sent_at < not_before:
            return None
        return abandoned
