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
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

from localrun.tcp_proxy import tcp_proxy

# Seconds the child may take to start the proxy and print its address.
START_TIMEOUT_SECONDS = 60


@contextlib.contextmanager
def firestore_route(emulator_host: str, rtt_ms: float) -> Iterator[str]:
    """The host:port a client should use to reach the emulator `rtt_ms` away."""
    if rtt_ms < 0:
        raise ValueError(f"a round-trip time is 0 ms or more, got {rtt_ms:g}")
    if rtt_ms == 0:
        yield emulator_host
        return
    command = [sys.executable, "-m", "bench.network", emulator_host, repr(rtt_ms / 1000)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            host = _first_line(child)
            yield host
        finally:
            child.stdin.close()  # the child's signal to stop
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def _first_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line:
        code = child.wait(timeout=START_TIMEOUT_SECONDS)
        raise RuntimeError(f"the round-trip proxy exited with status {code} before listening")
    return line


def serve(target: str, round_trip_seconds: float) -> None:
    """Forward to `target` until standard input closes (the parent is done, or gone)."""
    with tcp_proxy(target, round_trip_seconds=round_trip_seconds) as proxy:
        print(proxy.host, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.network HOST:PORT ROUND_TRIP_SECONDS")
    serve(sys.argv[1], float(sys.argv[2]))
