"""The loopback proxy the demo and the tests put in front of Firestore, against a real echo server."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from localrun.tcp_proxy import tcp_proxy
from tests.support.loopback_fake import LoopbackFake
from tests.support.waiting import wait_until


class EchoServer(LoopbackFake[bytes]):
    """A loopback server that sends back every byte it receives, on each connection; records
    what each read brought."""

    def _open(self) -> int:
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return int(self._listener.getsockname()[1])

    def _close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._listener.accept()
                threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                self.record(data)
                conn.sendall(data)


@contextlib.contextmanager
def echo_server() -> Iterator[str]:
    """An EchoServer's host:port for as long as the block runs."""
    with EchoServer() as server:
        yield f"127.0.0.1:{server.port}"


def connect(host: str) -> socket.socket:
    address, _, port = host.rpartition(":")
    sock = socket.create_connection((address, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_each_round_trip_takes_at_least_the_delay_and_bytes_arrive_in_order():
    with (
        echo_server() as target,
        tcp_proxy(target, round_trip_seconds=0.2) as proxy,
        connect(proxy.host) as sock,
    ):
        started = time.monotonic()
        sock.sendall(b"ping")
        assert receive(sock, 4) == b"ping"
        assert time.monotonic() - started >= 0.2  # half of it each way

        # Many chunks sent back to back, each delayed on its own: all of them, in order.
        chunks = [f"{index:05d};".encode() for index in range(500)]
        for chunk in chunks:
            sock.sendall(chunk)
        assert receive(sock, sum(map(len, chunks))) == b"".join(chunks)
    assert proxy.forwarded == 1


def test_a_refused_proxy_drops_connections_until_restored():
    with echo_server() as target, tcp_proxy(target) as proxy:
        with connect(proxy.host) as sock:
            sock.sendall(b"up")
            assert receive(sock, 2) == b"up"
            proxy.cut("refuse")
            assert receive(sock, 1) == b""  # the open connection is closed too
        with connect(proxy.host) as refused:
            assert receive(refused, 1) == b""
        proxy.restore()
        with connect(proxy.host) as sock:
            sock.sendall(b"back")
            assert receive(sock, 4) == b"back"


def test_a_blackholed_proxy_accepts_and_never_answers():
    with echo_server() as target, tcp_proxy(target) as proxy:
        proxy.cut("blackhole")
        with connect(proxy.host) as sock:
            sock.settimeout(0.5)
            sock.sendall(b"anyone?")
            with pytest.raises(TimeoutError):
                sock.recv(1)


def test_a_held_request_waits_alone_and_only_once():
    """The next chunk is held with what follows it on its connection; another connection's
    round trip passes meanwhile, and the chunk after the held one is not held again."""
    with (
        echo_server() as target,
        tcp_proxy(target) as proxy,
        connect(proxy.host) as slow,
        connect(proxy.host) as fast,
    ):
        proxy.hold_next_request(2.0)
        started = time.monotonic()
        slow.sendall(b"slow")
        wait_until(lambda: proxy.held == 1, timeout=10, what="the proxy to hold the first chunk")
        fast.sendall(b"fast")
        assert receive(fast, 4) == b"fast"
        slow.setblocking(False)
        with pytest.raises(BlockingIOError):
            slow.recv(1)  # still held
        slow.setblocking(True)
        assert receive(slow, 4) == b"slow"
        assert time.monotonic() - started >= 2.0
        slow.sendall(b"again")
        assert receive(slow, 5) == b"again"
    assert proxy.held == 1


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="round_trip_seconds"):
        tcp_proxy("127.0.0.1:1", round_trip_seconds=-1).__enter__()
    with echo_server() as target, tcp_proxy(target) as proxy, pytest.raises(ValueError, match="seconds"):
        proxy.hold_next_request(0)
    with echo_server() as target, tcp_proxy(target) as proxy, pytest.raises(ValueError, match="cut mode"):
        proxy.cut("sideways")  # type: ignore[arg-type]
