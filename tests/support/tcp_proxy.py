"""A loopback TCP proxy in front of the Firestore emulator that a test can cut.

Cutting it is what an unreachable Firestore looks like from the function: `refuse` drops
every connection (as a stopped emulator would), `blackhole` accepts connections and never
answers (as a network partition would, where only timeouts help). Existing connections are
closed either way, so the client's open gRPC channel breaks too.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from localrun.emulator import free_loopback_port


class TcpProxy:
    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self.port = free_loopback_port()
        self.host = f"127.0.0.1:{self.port}"
        self.mode = "forward"
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, mode: str = "refuse") -> None:
        assert mode in ("refuse", "blackhole")
        self.mode = mode
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def restore(self) -> None:
        self.mode = "forward"

    def close(self) -> None:
        self._stopped.set()
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == "refuse":
                client.close()
                continue
            self._track(client)
            if self.mode == "blackhole":
                continue  # held open, never read, never answered
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            self._track(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def tcp_proxy(target: str) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target)
    try:
        yield proxy
    finally:
        proxy.close()
