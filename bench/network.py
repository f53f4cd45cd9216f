"""The network between the function and Firestore, as `make bench` models it.

On loopback an RPC to the emulator costs the emulator's CPU and nothing else; a deployed
function is a network hop away from Firestore. Here the function's Firestore client (ours and
the baseline's alike) reaches the emulator through localrun's TcpProxy, which holds every
chunk for half the round-trip time in each direction, in order, without limiting bandwidth:
each RPC then costs at least one round trip, as it would against a real database.

The proxy runs in a process of its own (`python -m bench.network TARGET RTT_SECONDS`), not in
the benchmark's: its threads would otherwise compete with the code being measured for the
interpreter lock, which a real network never does. RTT 0 is no proxy at all: the direct
loopback connection every earlier measurement used.

The proxy also counts the gRPC calls that pass through it (`Route.rpcs()`): each call is one
HTTP/2 stream the client opens, so the count is what a served function really sent, read on
the wire from outside its process. A route asked to count at RTT 0 is a proxy without delay.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

from localrun.tcp_proxy import tcp_proxy

# Seconds the child may take to start the proxy and print its address.
START_TIMEOUT_SECONDS = 60
# What the parent writes to the child for the RPCs counted so far.
COUNT_REQUEST = "count"
# HTTP/2 (RFC 9113): what a client sends first, then frames of a 9-byte header each.
CLIENT_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_BYTES = 9
HEADERS_FRAME = 0x1


class Route:
    """Where a client reaches the emulator, and how many RPCs it sent there so far (None on
    the direct connection, where nothing sits in between to count)."""

    def __init__(self, host: str, child: subprocess.Popen[str] | None = None) -> None:
        self.host = host
        self._child = child

    def rpcs(self) -> int | None:
        if self._child is None:
            return None
        assert self._child.stdin is not None and self._child.stdout is not None
        self._child.stdin.write(COUNT_REQUEST + "\n")
        self._child.stdin.flush()
        return int(self._child.stdout.readline())


@contextlib.contextmanager
def firestore_route(emulator_host: str, rtt_ms: float) -> Iterator[str]:
    """The host:port a client should use to reach the emulator `rtt_ms` away."""
    with counted_route(emulator_host, rtt_ms, count=False) as route:
        yield route.host


@contextlib.contextmanager
def counted_route(emulator_host: str, rtt_ms: float, *, count: bool = True) -> Iterator[Route]:
    """A route `rtt_ms` away that counts the RPCs sent through it; at RTT 0 a proxy without
    delay when `count`, else the direct connection."""
    if rtt_ms < 0:
        raise ValueError(f"a round-trip time is 0 ms or more, got {rtt_ms:g}")
    if rtt_ms == 0 and not count:
        yield Route(emulator_host)
        return
    command = [sys.executable, "-m", "bench.network", emulator_host, repr(rtt_ms / 1000)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            yield Route(_first_line(child), child)
        finally:
            child.stdin.close()  # the child's signal to stop
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


class StreamCount:
    """The HTTP/2 streams clients opened, over all connections: one per gRPC call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0

    def opened(self) -> None:
        with self._lock:
            self.total += 1

    def connection(self) -> Callable[[bytes], None]:
        """What reads one connection's client bytes: its own frame parser."""
        return NewStreams(self.opened).feed


class NewStreams:
    """Reads a client's HTTP/2 byte stream frame by frame, however it is split into chunks,
    and reports each HEADERS frame that opens a stream (a client's streams have odd ids, each
    higher than the last: RFC 9113 section 5.1.1). Only frame headers are parsed; payloads are
    skipped unread."""

    def __init__(self, opened: Callable[[], None]) -> None:
        self._opened = opened
        self._skip = len(CLIENT_PREFACE)
        self._header = b""
        self._highest = 0

    def feed(self, data: bytes) -> None:
        at = 0
        while at < len(data):
            if self._skip:
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                continue
            take = FRAME_HEADER_BYTES - len(self._header)
            self._header += data[at : at + take]
            at += take
            if len(self._header) < FRAME_HEADER_BYTES:
                return
            header, self._header = self._header, b""
            self._skip = int.from_bytes(header[0:3], "big")
            stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
            if header[3] == HEADERS_FRAME and stream % 2 == 1 and stream > self._highest:
                self._highest = stream
                self._opened()


def _first_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line:
        code = child.wait(timeout=START_TIMEOUT_SECONDS)
        raise RuntimeError(f"the round-trip proxy exited with status {code} before listening")
    return line


def serve(target: str, round_trip_seconds: float) -> None:
    """Forward to `target` until standard input closes (the parent is done, or gone),
    answering each COUNT_REQUEST line with the RPCs counted so far."""
    streams = StreamCount()
    with tcp_proxy(target, round_trip_seconds=round_trip_seconds, request_tap=streams.connection) as proxy:
        print(proxy.host, flush=True)
        for line in sys.stdin:
            if line.strip() == COUNT_REQUEST:
                print(streams.total, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.network HOST:PORT ROUND_TRIP_SECONDS")
    serve(sys.argv[1], float(sys.argv[2]))
