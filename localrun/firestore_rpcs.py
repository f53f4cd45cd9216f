"""Count the Firestore RPCs a client really sends, at the gRPC layer.

"Two writes per run" is a claim about the wire, so it is measured on the wire: a client
interceptor on the channel the Firestore client uses, not a count of our own method calls.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
from google.cloud import firestore
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports import FirestoreGrpcTransport


class RpcCounter(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Counts calls per method name, e.g. {"Commit": 2}; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self._calls)

    def reset(self) -> None:
        with self._lock:
            self._calls.clear()

    def _count(self, details: grpc.ClientCallDetails) -> None:
        method = details.method
        name = (method.decode() if isinstance(method, bytes) else str(method)).rsplit("/", 1)[-1]
        with self._lock:
            self._calls[name] += 1

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        self._count(details)
        return continuation(details, request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        self._count(details)
        return continuation(details, request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        self._count(details)
        return continuation(details, requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        self._count(details)
        return continuation(details, requests)


def counted_emulator_client(emulator_host: str, project: str) -> tuple[firestore.Client, RpcCounter]:
    """A Firestore client for the emulator whose every RPC passes through an RpcCounter.

    The SDK builds its channel lazily; we hand it one built the same way as its own emulator
    channel (insecure, owner token option) but intercepted, through the client's GAPIC slot.
    """
    client = firestore.Client(project=project)
    counter = RpcCounter()
    options = [("Authorization", "Bearer owner")]
    channel = grpc.intercept_channel(grpc.insecure_channel(emulator_host, options=options), counter)
    transport = FirestoreGrpcTransport(host=emulator_host, channel=channel)
    client._firestore_api_internal = FirestoreClient(transport=transport)
    return client, counter
