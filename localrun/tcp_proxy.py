"""A loopback TCP proxy in front of a server (the Firestore emulator): the network between the
function and its database, made slow or cut on purpose.

- A round-trip time: each chunk is held for half of it in each direction, then sent on, in
  order. Chunks are read as soon as they arrive and each waits out its own delay, so the
  delay adds latency without limiting bandwidth, like a long link rather than a thin one.
  Every Firestore call through it takes at least one round trip, as it would to a distant
  region. The demo's `--firestore-rtt-ms` uses it; so can a benchmark of network latency.
- Cut: `refuse` drops every connection, as a stopped server would; `blackhole` accepts
  connections and never answers, as a network partition would, where only timeouts help.
  Existing connections are closed either way, so a client's open gRPC channel breaks too.
  `restore()` forwards new connections again.
- Lost answers: `lose_answers()` forwards every request but drops what the server answers,
  as a network that fails on the way back does: the server acts, the client never learns.
  `deliver_answers()` reconnects (every open connection is closed) and answers flow again.
- One slow request: `hold_next_request(seconds)` holds the next bytes a client sends for
  `seconds`, then forwards them; what follows on that connection waits behind them (TCP
  keeps order), other connections do not. A first call that hangs, a retry that need not.
- Seen requests: `request_tap`, if given, is called once per connection and returns what is
  handed every chunk the client sends on it, as it arrives (bench/network.py counts the
  gRPC calls there: what a client really sent, whatever process it runs in).
"""

from __future__ import annotations

import contextlib
import math
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal

from localrun.emulator import free_loopback_port
from localrun.port_holder import PORT_ATTEMPTS

CutMode = Literal["refuse", "blackhole"]
CUT_MODES: tuple[CutMode, ...] = ("refuse", "blackhole")
_CHUNK_BYTES = 65536
# Marks the end of a direction's stream in its delay queue.
_END = b""


class TcpProxy:
    """Listens on 127.0.0.1:`port` (`host` as a client's "host:port") and forwards to `target`."""

    def __init__(
        self, target: str, *, round_trip_seconds: float = 0.0, request_tap: RequestTap | None = None
    ) -> None:
        if not round_trip_seconds >= 0:
            raise ValueError(f"round_trip_seconds must be 0 or more, got {round_trip_seconds}")
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self.round_trip_seconds = round_trip_seconds
        self._request_tap = request_tap
        self.mode: Literal["forward"] | CutMode = "forward"
        # Connections accepted and forwarded: proof that a client really goes through here.
        self.forwarded = 0
        # Chunks held by hold_next_request(): proof that the hold was spent, and on what.
        self.held = 0
        # What the round trip did to each direction's chunks: proof that each was delayed.
        self.request_delays = ChunkDelays()
        self.answer_delays = ChunkDelays()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._losing_answers = threading.Event()
        self._hold_seconds = 0.0
        self._listener = _listen_on_a_free_port()
        self.port = int(self._listener.getsockname()[1])
        self.host = f"127.0.0.1:{self.port}"
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    def cut(self, mode: CutMode = "refuse") -> None:
        if mode not in CUT_MODES:
            raise ValueError(f"cut mode {mode!r} is not one of {CUT_MODES}")
        self.mode = mode
        with self._lock:
            for sock in self._sockets:
                _close(sock)
            self._sockets.clear()

    def restore(self) -> None:
        self.mode = "forward"

    def lose_answers(self) -> None:
        self._losing_answers.set()

    def deliver_answers(self) -> None:
        """Answers flow again, on new connections only: every open one is closed."""
        self._losing_answers.clear()
        self.cut()
        self.restore()

    def hold_next_request(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        with self._lock:
            self._hold_seconds = seconds

    def _take_hold(self) -> float:
        """The hold for the chunk about to be forwarded (0: none), given to one chunk only."""
        with self._lock:
            seconds, self._hold_seconds = self._hold_seconds, 0.0
            if seconds:
                self.held += 1
        return seconds

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
                _close(client)
                continue
            upstream.settimeout(None)
            self._track(upstream)
            self.forwarded += 1
            one_way = self.round_trip_seconds / 2
            pipe = _pipe if one_way == 0 else _delayed_pipe
            seen = self._request_tap() if self._request_tap is not None else None
            for source, sink, dropping, holding, delays, seeing in (
                (client, upstream, None, self._take_hold, self.request_delays, seen),
                (upstream, client, self._losing_answers, None, self.answer_delays, None),
            ):
                args = (source, sink, one_way, dropping, holding, delays, seeing)
                threading.Thread(target=pipe, args=args, daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._sockets.add(sock)


# What a request direction asks before forwarding each chunk: seconds to hold it first.
Holding = Callable[[], float] | None
# Handed each chunk a direction reads, before it is forwarded; one per connection.
Seeing = Callable[[bytes], None] | None
RequestTap = Callable[[], Callable[[bytes], None]]


class ChunkDelays:
    """The chunks one direction's round-trip delay held, counted, and the shortest time one
    of them spent here, from the read that received it to the send that passed it on: the
    proxy's own account of its delay, which no client's clock or speed enters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.chunks = 0
        self.shortest_seconds = math.inf

    def record(self, received_at: float, sent_at: float) -> None:
        with self._lock:
            self.chunks += 1
            self.shortest_seconds = min(self.shortest_seconds, sent_at - received_at)


def _listen_on_a_free_port() -> socket.socket:
    """A listening socket on a port of this process's share. The port was free when picked;
    another process may bind it before this one does, and then another is picked."""
    for _ in range(PORT_ATTEMPTS - 1):
        with contextlib.suppress(OSError):
            return socket.create_server(("127.0.0.1", free_loopback_port()))
    return socket.create_server(("127.0.0.1", free_loopback_port()))


def _pipe(
    source: socket.socket,
    sink: socket.socket,
    _one_way: float,
    dropping: threading.Event | None,
    holding: Holding,
    _delays: ChunkDelays,
    seeing: Seeing = None,
) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(_CHUNK_BYTES):
            if seeing is not None:
                seeing(data)
            if holding is not None and (held := holding()):
                time.sleep(held)  # this thread alone forwards the connection: all of it waits
            if dropping is None or not dropping.is_set():
                sink.sendall(data)
    _shut(source, sink)


def _delayed_pipe(
    source: socket.socket,
    sink: socket.socket,
    one_way: float,
    dropping: threading.Event | None,
    holding: Holding,
    delays: ChunkDelays,
    seeing: Seeing = None,
) -> None:
    """Read on this thread, send on another: a chunk waits out its own delay without holding
    up the reads of the chunks behind it."""
    pending: queue.SimpleQueue[tuple[float, bytes, float]] = queue.SimpleQueue()
    args = (pending, source, sink, delays)
    sender = threading.Thread(target=_send_when_due, args=args, daemon=True)
    sender.start()
    with contextlib.suppress(OSError):
        while data := source.recv(_CHUNK_BYTES):
            received = time.monotonic()
            if seeing is not None:
                seeing(data)
            held = holding() if holding is not None else 0.0  # the sender keeps order
            if dropping is None or not dropping.is_set():
                pending.put((received + one_way + held, data, received))
    pending.put((time.monotonic() + one_way, _END, 0.0))


def _send_when_due(
    pending: queue.SimpleQueue[tuple[float, bytes, float]],
    source: socket.socket,
    sink: socket.socket,
    delays: ChunkDelays,
) -> None:
    with contextlib.suppress(OSError):
        while True:
            due, data, received = pending.get()
            time.sleep(max(0.0, due - time.monotonic()))
            if not data:
                break
            sink.sendall(data)
            delays.record(received, time.monotonic())
    _shut(source, sink)  # after the last chunk: an end travels no faster than the data


def _shut(*sockets: socket.socket) -> None:
    """End both directions of a connection. Only cut() and close() close the sockets: a
    pipe's other thread may still be using them."""
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _close(sock: socket.socket) -> None:
    _shut(sock)
    sock.close()


@contextlib.contextmanager
def tcp_proxy(
    target: str, *, round_trip_seconds: float = 0.0, request_tap: RequestTap | None = None
) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target, round_trip_seconds=round_trip_seconds, request_tap=request_tap)
    try:
        yield proxy
    finally:
        proxy.close()
