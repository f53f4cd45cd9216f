"""A TcpProxy in front of the emulator that can lose its answers: a write that commits and
whose answer never reaches the client, as a connection dropped at the wrong moment (or an
RPC that outlives its per-RPC timeout) leaves it.

While answers are lost, requests still reach the emulator, which commits them; what it sends
back is dropped. `reconnect()` then closes every connection: the client's call in flight
fails UNAVAILABLE and the client library sends it again, on a new connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import cast

from tests.support.tcp_proxy import TcpProxy


class _LosableSink:
    """The client's end of a connection, as the emulator's answers are written to it."""

    def __init__(self, sock: socket.socket, losing: threading.Event) -> None:
        self._sock = sock
        self._losing = losing

    def sendall(self, data: bytes) -> None:
        if not self._losing.is_set():
            self._sock.sendall(data)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)


class AnswerLosingProxy(TcpProxy):
    def __init__(self, target: str) -> None:
        self._losing = threading.Event()  # before the base class starts accepting
        super().__init__(target)

    def lose_answers(self) -> None:
        self._losing.set()

    def reconnect(self) -> None:
        """Deliver answers again, on new connections only: every open one is closed."""
        self._losing.clear()
        self.cut()
        self.restore()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:  # type: ignore[override]
        # The proxy's own port is the client's side: bytes read elsewhere are answers.
        if source.getsockname()[1] != self.port:
            sink = cast(socket.socket, _LosableSink(sink, self._losing))
        TcpProxy._pipe(source, sink)


@contextlib.contextmanager
def answer_losing_proxy(target: str) -> Iterator[AnswerLosingProxy]:
    proxy = AnswerLosingProxy(target)
    try:
        yield proxy
    finally:
        proxy.close()
