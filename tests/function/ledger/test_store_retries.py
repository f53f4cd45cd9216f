"""A first Firestore call that hangs is abandoned and retried within its operation's budget,
on the real emulator behind a loopback proxy that holds one request.

With the stack's 30 s lease a ledger operation may wait 10 s and one call a third of that.
The proxy holds the operation's first request for 7/12 of the budget: longer than a call may
take, so the first call times out, yet early enough for its retry (sent after a third of the
budget, allowed another third) to be answered. With calls allowed half the budget the first
would time out just the same, and no retry would fit in what is left: the operation fails.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from exactly_once.ledger.protocol import ClaimKind, RunLedger
from exactly_once.ledger.store import ATTEMPT_SHARE, FirestoreRunStore
from localrun.firestore_rpcs import counted_emulator_client
from localrun.tcp_proxy import tcp_proxy
from tests.support.ledger_runs import KEY, RETENTION, record

LEASE = timedelta(seconds=30)
HOLD_SHARE = 7 / 12


@pytest.mark.parametrize(
    ("operation", "rpc", "status"),
    [("claim", "BatchWrite", "in_progress"), ("complete", "Commit", "completed")],
)
def test_a_first_round_trip_that_hangs_is_retried_within_the_budget(
    emulator_host, project, db, operation, rpc, status
):
    with tcp_proxy(emulator_host) as proxy:
        client, rpcs = counted_emulator_client(proxy.host, project)
        ledger = RunLedger(FirestoreRunStore(client, "scheduler_runs"), lease=LEASE, retention=RETENTION)
        budget = ledger.deadline_seconds
        assert budget == 10 and budget * ATTEMPT_SHARE < budget * HOLD_SHARE < 2 * budget * ATTEMPT_SHARE
        assert ledger.store.get("warm-up", timeout=budget) is None  # the channel is up and idle
        claimed = ledger.claim(KEY, "slow-first") if operation == "complete" else None

        rpcs.reset()
        proxy.hold_next_request(budget * HOLD_SHARE)
        if claimed is not None:
            ledger.complete(claimed)
        else:
            assert ledger.claim(KEY, "slow-first").kind is ClaimKind.CREATED
        sent = rpcs.snapshot()

    assert proxy.held == 1
    assert sent[rpc] == 2, sent  # the call that hung, and its retry
    fields = record(db).to_dict()
    assert (fields["attempt_id"], fields["status"]) == ("slow-first", status)
