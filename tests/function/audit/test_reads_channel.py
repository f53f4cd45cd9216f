"""The audit's reads have a channel of their own (audit/reads.py `firestore_api`): on Firestore it
is the one the generated transport builds (its host, credentials and message limits) with the
option that receives a batched get's stream on the reading thread. (Every test that audits on
the emulator reads through the emulator's.)"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.firestore_v1.services.firestore.transports.grpc import FirestoreGrpcTransport

from exactly_once.audit.reads import EMULATOR_HOST_ENV, firestore_api


def test_on_firestore_the_transports_own_channel_carries_the_reads_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(EMULATOR_HOST_ENV, raising=False)
    built: list[dict[str, Any]] = []
    create = FirestoreGrpcTransport.create_channel

    def recorded(host: str, **settings: Any) -> grpc.Channel:
        built.append({"host": host, **settings})
        channel: grpc.Channel = create(host, **settings)
        return channel

    monkeypatch.setattr(FirestoreGrpcTransport, "create_channel", recorded)
    credentials = AnonymousCredentials()
    firestore_api(credentials)

    (channel,) = built
    assert channel["host"] == "firestore.googleapis.com:443"
    assert channel["credentials"] is credentials
    options = dict(channel["options"])
    assert options[grpc.experimental.ChannelOptions.SingleThreadedUnaryStream] == 1
    assert options["grpc.max_receive_message_length"] == -1  # the transport's own, kept
